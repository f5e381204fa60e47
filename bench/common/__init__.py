"""What every benchmark shares: the one load generator and its Record (loadgen), the translator.v1 client
(translator), server processes (serverproc), inputs (workload) and progress bars (progress)."""
