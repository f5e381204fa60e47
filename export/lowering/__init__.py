"""How the PyTorch model becomes ONNX graph nodes: attention lowerings, log-normalizer, the tied matrix."""
