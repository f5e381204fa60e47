"""Graphs derived from the verified fp32 ones: fp16 (CUDA) and int8 (CPU) variants, offline optimization."""
