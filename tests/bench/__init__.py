"""Tests of bench/: the benchmarks, soak and fuzz drivers on tiny models."""
