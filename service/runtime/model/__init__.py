"""The loaded model: its bundle, ONNX Runtime sessions and providers, and its tokenizers."""
