"""Tests of export/hf/ and `python -m export.pretrained`: imported Hugging Face checkpoints."""
