"""One server's latency-throughput curve per protocol (gRPC, KServe v2 gRPC, HTTP infer, generate)."""
