"""Process-level concerns without gRPC: metrics, model statistics, readiness, allocator settings."""
