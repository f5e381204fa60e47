"""Tests of service/domain: options, limits."""
