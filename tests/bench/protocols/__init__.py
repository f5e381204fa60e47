"""Tests of bench/protocols: one client per protocol and the per-protocol curve."""
