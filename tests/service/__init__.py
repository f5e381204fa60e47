"""Tests of service/: the server end to end, and one folder per layer."""
