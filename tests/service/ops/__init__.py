"""Tests of service/ops: metrics, allocator settings."""
