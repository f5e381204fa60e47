"""Model export to ONNX: tracing (export.py), the pipeline (build.py), the manifest (bundle.py), packed
weights (weights.py); lowering/, variants/, verify/, and hf/ (Hugging Face import, export/pretrained.py)."""
