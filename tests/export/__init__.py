"""Tests of export/: ONNX export, attention lowerings, verification, the shipped bundle."""
