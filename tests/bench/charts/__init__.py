"""Tests of bench/charts: each chart drawn from a small recorded fixture."""
