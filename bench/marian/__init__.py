"""`python -m bench.marian`: the Marian entry of the per-family benchmark (bench/families/)."""
