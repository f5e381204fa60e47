"""KServe ModelMesh model-runtime protos (package mmesh)."""
