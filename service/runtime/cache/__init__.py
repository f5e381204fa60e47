"""The KV cache: where its rows live (host or device memory) and the backends that run the graphs on it."""
