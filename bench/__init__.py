"""Benchmarks, soak and fuzz drivers, by family (bench/README.md lists every command)."""
