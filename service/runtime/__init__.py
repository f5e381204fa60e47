"""Synchronous ONNX Runtime inference: bundle, sessions, backends, KV caches, search, decode batch."""
