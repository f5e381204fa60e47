"""Tests of bench/common: the load generator, its Record and Summary, and the progress bars."""
