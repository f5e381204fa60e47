"""Model export to ONNX: names, export, verification, bundle."""
