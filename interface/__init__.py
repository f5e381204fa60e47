"""Torch-free names shared by export/ (which writes bundles) and service/ (which reads them)."""
