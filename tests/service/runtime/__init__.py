"""Tests of service/runtime: sessions, backends, KV caches, the decode batch, the runner."""
