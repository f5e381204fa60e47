"""Tests of export/variants/: the fp16 (CUDA) and int8 (CPU) variants."""
