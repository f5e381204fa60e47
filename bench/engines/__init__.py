"""Engines in process: our ONNX Runtime decoder against PyTorch and CTranslate2 (`python -m bench.engines`),
the server against CTranslate2 (vs_ct2), the provider A/B, ORT's profile, controlled decoding's and Score's
costs, and random-weight models of other shapes (shaped)."""
