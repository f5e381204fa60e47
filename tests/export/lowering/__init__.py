"""Tests of export/lowering/: attention lowerings, the log-normalizer, the tied matrix."""
