"""Benchmarks: engines, the server's batching modes, scaling and memory (`python -m bench`)."""
