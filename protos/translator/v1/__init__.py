"""Generated modules of translator.v1: translator_pb2 and translator_pb2_grpc."""
