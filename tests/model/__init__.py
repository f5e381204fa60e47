"""Tests of model/: the network, decoding, corpus and training."""
