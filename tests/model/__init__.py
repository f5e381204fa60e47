"""Tests of model/: the network, decoding, training and evaluation."""
