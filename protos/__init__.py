"""Protocol definitions and their generated modules (generated on first import when missing).

Importing any `protos.*` module first makes sure the generated `*_pb2*.py` files exist and are
newer than their .proto sources, so `pytest` or `python -m service...` work without `make protos`.
"""

from protos.codegen import ensure_generated

ensure_generated()
