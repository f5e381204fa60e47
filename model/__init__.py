"""The Transformer of "Attention is All You Need" in PyTorch: model, data, training, evaluation."""
