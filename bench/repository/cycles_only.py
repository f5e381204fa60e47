"""The repository benchmark's load/unload cycles alone (its part 3), for measuring a memory change quickly.

    python -m bench.repository.cycles_only [--cycles N] [--warmup-cycles N] [--quick] [--control] [--bundle D]
        [--beam N] [--max-output-tokens N]

Prints the RSS after each unload and, last, one JSON object: the model's size, the growth from after the
warm-up cycles to after the last (MiB and % of the model), from after the first cycle, and over the second
half, and the requests lost. `--control` sends the same traffic with the cycled model loaded once and never
unloaded: what the load alone adds to the process. Environment variables (MALLOC_ARENA_MAX, ...) reach the
server process unchanged. For the opus-mt shape (`--bundle runs/bench-marian/full/bundle`), `--beam 1
--max-output-tokens 16` keeps its requests short: an imported model decodes with its checkpoint's beam of 4.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import tritonclient.grpc as triton

from bench.common.workload import DEFAULT_BUNDLE, held_out_sources
from bench.repository import cycles
from bench.repository.plan import QUICK, Plan


class _Kept(triton.InferenceServerClient):
    """A client whose first load is real and whose other loads and unloads do nothing (the control)."""

    loaded = False

    def load_model(self, name: str, **kwargs: object) -> None:
        """Load the model the first time only."""
        if not self.loaded:
            super().load_model(name, **kwargs)
            self.loaded = True

    def unload_model(self, name: str, **kwargs: object) -> None:
        """Nothing: the model stays loaded."""


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(prog="python -m bench.repository.cycles_only",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick plan's requests per cycle")
    ap.add_argument("--cycles", type=int, default=Plan().cycles, help="load/unload cycles")
    ap.add_argument("--warmup-cycles", type=int, default=Plan().warmup_cycles, help="uncounted cycles first")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="the bundle both models copy")
    ap.add_argument("--control", action="store_true",
                    help="the same traffic with the cycled model loaded once and never unloaded")
    ap.add_argument("--beam", type=int, default=0, help="every request's beam size (0 = the model's default)")
    ap.add_argument("--max-output-tokens", type=int, default=None,
                    help="every request's new-token limit (default: the plan's; 0 = the model's own)")
    a = ap.parse_args(argv)
    if a.control:
        cycles._triton = lambda server: _Kept(server.address)  # noqa: SLF001 - the control run's client
    plan = replace(QUICK if a.quick else Plan(), cycles=a.cycles, warmup_cycles=a.warmup_cycles)
    with tempfile.TemporaryDirectory(prefix="bench-cycles-") as tmp:
        limit = plan.max_output_tokens if a.max_output_tokens is None else a.max_output_tokens
        got = cycles.run(a.bundle, Path(tmp), held_out_sources()[: plan.texts], plan, limit,
                         lambda line: print(line, file=sys.stderr, flush=True), a.beam)
    keys = ("beam_size", "model_mib", "warmup_cycles",
            "rss_started_mib", "rss_after_warmup_mib", "rss_after_first_mib",
            "rss_after_last_mib", "rss_peak_mib", "rss_growth_mib", "rss_growth_from_first_cycle_mib",
            "rss_growth_last_half_mib", "rss_growth_pct_of_model", "requests_sent", "requests_lost")
    summary = {k: round(got[k], 2) if isinstance(got[k], float) else got[k] for k in keys}
    summary["rss_samples_mib"] = [round(v, 1) for v in got["rss_samples_mib"]]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
