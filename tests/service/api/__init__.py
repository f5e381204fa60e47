"""Tests of service/api: servicers, codecs, KServe v2 / Triton tools, TLS."""
