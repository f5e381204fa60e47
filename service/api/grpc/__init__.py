"""The gRPC adapters: translator.v1, KServe v2 and ModelMesh servicers, and the interceptor around them."""
