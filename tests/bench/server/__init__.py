"""Tests of bench/server: the batching modes, scaling, perf_analyzer and HTTP against gRPC."""
