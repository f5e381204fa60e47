"""The real server under load: per batching mode (`python -m bench.server`), scaling and memory, Triton's
perf_analyzer, HTTP against gRPC, and in-process decoding as the reference a server is compared with."""
