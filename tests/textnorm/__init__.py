"""Tests of textnorm/: the verbalization rules and the default corpus generator."""
