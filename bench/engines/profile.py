"""Where a decoder step spends its time: ONNX Runtime's own profiler over the service's decoder.

    python -m bench.engines.profile [--bundle DIR] [--variant int8] [--batches 1 32] [--new-tokens N]

For each batch size b, a Runner with ORT profiling on (of the bundle's default variant, or --variant's)
decodes b held-out sentences at a time (greedy, static batches, up to --new-tokens each: a random-weight model
never stops early); the profile's kernel events are summed by operator
type, per decoder run (and per encoder run). Prints a table per b and graph (kernels per run,
microseconds per run, share of kernel time) and, with --json FILE, writes the figures.
docs/performance.md keeps what it showed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.common.workload import DEFAULT_BUNDLE, HELD_OUT, held_out_sources
from service.domain.errors import BundleError
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner


@dataclass
class Profile:
    """Kernel time of one graph by operator type, normalised per run of the graph."""

    runs: int
    by_op: dict[str, tuple[float, float]] = field(default_factory=dict)  # op -> (kernels, us) per run

    @property
    def kernels_per_run(self) -> float:
        """Kernel launches per run of the graph."""
        return sum(k for k, _ in self.by_op.values())

    @property
    def us_per_run(self) -> float:
        """Kernel microseconds per run of the graph."""
        return sum(us for _, us in self.by_op.values())


def summarize(events: list[dict], graph_runs: int) -> Profile:
    """Sum the profile's kernel events ("Node" category, "*_kernel_time") by operator type."""
    kernels: dict[str, int] = defaultdict(int)
    micros: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.get("cat") != "Node" or not str(ev.get("name", "")).endswith("_kernel_time"):
            continue
        op = ev.get("args", {}).get("op_name", "?")
        kernels[op] += 1
        micros[op] += float(ev.get("dur", 0))
    runs = max(1, graph_runs)
    return Profile(runs, {op: (kernels[op] / runs, micros[op] / runs) for op in kernels})


def count_runs(events: list[dict]) -> int:
    """Number of model runs recorded in a profile ("model_run" session events)."""
    return sum(1 for ev in events if ev.get("cat") == "Session" and ev.get("name") == "model_run")


def profile_decoder(bundle: Path, sources: list[str], batch: int, threads: int,
                    work: Path, variant: str | None = None,
                    new_tokens: int | None = None) -> tuple[Profile, Profile]:
    """Profiles (encoder, decoder) of greedy decoding `sources` in static batches of `batch`, up to
    `new_tokens` tokens each (default: the model's limit)."""
    runner = Runner(bundle, intra_op_threads=threads, variant=variant,
                    profile_prefix=str(work / f"b{batch}"))
    ids = runner.encode_texts(sources)
    limit = runner.max_len - 1 if new_tokens is None else min(new_tokens, runner.max_len - 1)
    options = DecodeOptions(beam_size=1, max_output_tokens=limit)  # greedy, whatever the default
    for i in range(0, len(ids), batch):
        runner.translate(ids[i : i + batch], options, max_rows=batch)
    out = []
    for session in (runner.sessions.encoder, runner.sessions.decoder):
        events = json.loads(Path(session.end_profiling()).read_text())
        out.append(summarize(events, count_runs(events)))
    return out[0], out[1]


def table(profile: Profile, top: int = 12) -> str:
    """Markdown table of the heaviest operator types of one graph, per run."""
    total = profile.us_per_run or 1.0
    rows = sorted(profile.by_op.items(), key=lambda kv: -kv[1][1])
    lines = ["| operator | kernels per run | us per run | share |", "|---|---|---|---|"]
    for op, (k, us) in rows[:top]:
        lines.append(f"| {op} | {k:.1f} | {us:.1f} | {100 * us / total:.1f}% |")
    rest = rows[top:]
    if rest:
        k, us = sum(r[1][0] for r in rest), sum(r[1][1] for r in rest)
        lines.append(f"| ({len(rest)} others) | {k:.1f} | {us:.1f} | {100 * us / total:.1f}% |")
    lines.append(f"| **total** | {profile.kernels_per_run:.1f} | {profile.us_per_run:.1f} | 100% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: profile each batch size, print the tables."""
    ap = argparse.ArgumentParser(prog="python -m bench.engines.profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--variant", help="the variant to profile (base, int8, ...; default: the bundle's)")
    ap.add_argument("--split", type=Path, default=HELD_OUT)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--sentences", type=int, default=64, help="sentences decoded per batch size")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, help="most tokens per sentence (default: the model's limit)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)
    for flag, value in (("--sentences", a.sentences), ("--threads", a.threads), ("--batches", min(a.batches)),
                        ("--new-tokens", 1 if a.new_tokens is None else a.new_tokens)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, not {value}")
    sources = held_out_sources(a.split)[: a.sentences]
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        for b in a.batches:
            try:
                enc, dec = profile_decoder(a.bundle, sources, b, a.threads, Path(work), a.variant,
                                           a.new_tokens)
            except BundleError as exc:  # no bundle there, or no such variant in it
                ap.error(str(exc))
            print(f"\n## Decoder, batch {b}: {dec.runs} runs, {dec.kernels_per_run:.0f} kernels and "
                  f"{dec.us_per_run:.0f} us of kernel time per step; encoder {enc.us_per_run:.0f} us per run")
            print(table(dec), flush=True)
            print(f"\n### Encoder, batch {b}: {enc.runs} runs, {enc.kernels_per_run:.0f} kernels per run")
            print(table(enc, top=6), flush=True)
            figures[f"b{b}"] = {"decoder": dec.by_op, "decoder_runs": dec.runs, "encoder": enc.by_op,
                                "encoder_runs": enc.runs, "encoder_us_per_run": enc.us_per_run}
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
