"""Charts of what the benchmarks measure, drawn from their recorded JSON (`python -m bench.charts`)."""
