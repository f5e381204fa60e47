"""The default task, English text normalization: its rules (written -> spoken form) and corpus generator."""
