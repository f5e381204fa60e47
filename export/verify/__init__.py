"""Verification of the exported graphs and their variants against PyTorch (or the fp32 graphs)."""
