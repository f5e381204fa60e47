"""The gRPC layer: servicers, codecs, the exception -> status table, the interceptor, TLS."""
