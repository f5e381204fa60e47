"""What one run of the repository benchmark measures: sizes and counts (full by default; see QUICK)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """Counts and sizes of one run; every load is a fixed number of requests or cycles (bounded)."""

    concurrency: int = 32  # co-location: spread evenly over the two models
    requests: int = 1600  # co-location: per configuration and round, over both models
    warmup: int = 64  # co-location: per model, before each measured round
    rounds: int = 2  # co-location: two processes, then one process, repeated (interleaved)
    large_requests: int = 320  # co-location of the opus-mt-shaped bundle (a slower model)
    large_output_tokens: int = 32  # its random weights rarely emit eos: a fixed number of new tokens
    cycles: int = 20  # load/unload cycles of one model (counted)
    warmup_cycles: int = 20  # before them, under the same load: the process's warm-up, not counted
    cycle_requests: int = 16  # to the cycled model between its load and its unload
    steady_concurrency: int = 4  # the other model's load throughout the cycles
    probe_concurrency: int = 1  # requests to the cycled model throughout, loaded or not
    settle_s: float = 0.5  # after an unload, before the RSS sample (its memory goes in the background)
    perf_concurrency: tuple[int, ...] = (1, 8)
    perf_requests: int = 40  # perf_analyzer's count window at concurrency 1 (scaled with concurrency)
    texts: int = 400  # distinct texts sent (held-out sentences)
    max_output_tokens: int = 0  # of the default-sized models; 0 = the model's own limit
    large: bool = True  # co-location of the opus-mt-shaped bundle under runs/bench-marian too, when present
    large_cold: bool = True  # its cold load beside CTranslate2's (one load each: in quick runs too)
    intra_op_threads: int = 0  # every server's --intra-op-threads; 0 = the server's default (the cores)

    def server_args(self) -> list[str]:
        """Flags every server of the run gets besides its models (none: the defaults a user gets)."""
        return ["--intra-op-threads", str(self.intra_op_threads)] if self.intra_op_threads else []


QUICK = Plan(requests=320, warmup=32, rounds=1, cycle_requests=8, perf_concurrency=(1, 4),
             perf_requests=10, texts=200, large=False)
