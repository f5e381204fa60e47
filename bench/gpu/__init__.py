"""The GPU benchmark of `make gpu-check` (`python -m bench.gpu`): the engine and the server on CUDA."""
