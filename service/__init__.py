"""Torch-free serving: ONNX Runtime runner, scheduler, gRPC servicers, metrics."""
