"""One imported family side by side: our engine and server against CTranslate2's own converter, in float32
and in int8.

    python -m bench.families --family {marian,bart,mbart50,t5,pegasus} [--quick] [--out DIR]   # __main__.py

1. A random-weight model of a real checkpoint's shape with a made-up tokenizer (bench/families/registry.py:
   opus-mt-en-de, bart-large-cnn, mbart-large-50, t5-base, pegasus-large), built offline under `<out>/hf`
   (kept for reruns). `--quick`: d_model 64, 2 + 2 layers, vocabulary 1,000. The texts are made-up
   source-language sentences; T5's start with its task prefix ("translate English to German: ").
2. Imported by `python -m export.pretrained --quantize int8` (the fp32 files and the int8 variant,
   export/variants/int8.py) into `<out>/bundle`, and converted by CTranslate2's `ct2-transformers-converter
   --quantization float32` into `<out>/ct2` and `--quantization int8` into `<out>/ct2-int8`, all on
   every run.
3. Greedy, a fixed number of new tokens (random weights rarely emit eos), with the checkpoint's own rules:
   ours as the bundle states them, CTranslate2 told the same (bench/families/engines.py `ct2_rules`: the
   forced first token as a target prefix, no_repeat_ngram_size, min_length). Our `DecodeOptions
   (max_new_tokens=N)`, CTranslate2's `max_decoding_length=N`; both stop at eos the same way. Where
   the bundle forces eos as the last token allowed (`generation.forced_eos_at_limit`, transformers'
   forced_eos_token_id) ours decodes N - 1 free tokens then eos while CTranslate2 (which has no such
   rule) decodes N: the same N decoder steps, compared on ours' tokens. Tokens are counted as decoder
   steps (eos included).
4. Engines, each in its own process (bench/engines/process.py `EngineProcess`), same threads, interleaved
   repeats, median: our `Runner` (ONNX Runtime) on the fp32 files and on the int8 variant, CTranslate2
   float32 and int8, on the same source ids (the family's transformers tokenizer's) in static batches of
   1 and `batch`. Then the real server (`python -m service.server --bundle <out>/bundle --variant base`,
   then `--variant int8`, default flags otherwise; bench/common/serverproc.py) under
   bench/common/loadgen.py's closed loop at concurrency 1 and `batch` against CTranslate2 of the same
   precision in process on the same texts (the family's tokenizer in, text out).
5. Footprint (bench/families/footprint.py): each variant's bytes on disk, the memory each engine adds to a
   fresh process by loading and a warm-up, and a batch-1 decoder step against the memory-bandwidth floor.

Prints the markdown table, the token checks, the goal checks, and last a JSON object: the ratios (higher is
better for ours), the identical-token counts, every point's sentences/s, the bytes, the memory and the
floor. Writes `<out>/<family>-engines.json` and its chart (bench/charts/engines.py) beside it.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.common.serverproc import ServerProcess
from bench.common.workload import PAUSE_S
from bench.engines.process import EngineProcess, Point
from bench.families.engines import (
    CT2,
    CT2_DIRS,
    CT2_INT8,
    ORT,
    ORT_INT8,
    OURS,
    THEIRS,
    Ct2Engine,
    Output,
    family_engine,
    same,
    source_ids,
    steps,
)
from bench.families.footprint import (
    BANDWIDTH_MIB,
    ct2_bytes,
    load_memory,
    read_bandwidth,
    shared_bytes,
    step_bytes,
    variant_bytes,
)
from bench.families.registry import FAMILIES, family_dir
from bench.families.servers import (
    CT2_TEXT,
    CT2_TEXT_INT8,
    SERVER,
    SERVER_INT8,
    SERVERS,
    TEXT_ENGINES,
    compare_server,
)
from bench.families.text import Shape, source_texts

PAIRS = {"": (ORT, CT2), "_int8": (ORT_INT8, CT2_INT8)}  # ratio key suffix -> ours, CTranslate2


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    family: str = "marian"
    shape: Shape = FAMILIES["marian"].full
    sentences: int = 96  # texts; batch `batch` and concurrency `batch` take them all
    single: int = 32  # the first texts, for batch 1 and concurrency 1
    batch: int = 32
    new_tokens: int = 32
    repeats: int = 7
    threads: int = 2
    bandwidth_mib: int = BANDWIDTH_MIB  # the matrix read to measure the machine's read bandwidth


QUICK_PLAN = Plan(shape=FAMILIES["marian"].quick, sentences=32, single=8, repeats=2, bandwidth_mib=64)


def plan_for(family: str, quick: bool = False) -> Plan:
    """The full (or quick) plan of a family."""
    fam = FAMILIES[family]
    return replace(QUICK_PLAN if quick else Plan(), family=family, shape=fam.quick if quick else fam.full)


@dataclass
class Result:
    """Points, token checks and phase timings of a run."""

    family: str = "marian"
    points: list[Point] = field(default_factory=list)
    identical: int = 0  # ours == CTranslate2 (ids, both batch sizes), float32
    compared: int = 0
    int8_identical: int = 0  # our int8 == our fp32 (ids, both batch sizes)
    ct2_int8_identical: int = 0  # CTranslate2 int8 == CTranslate2 float32
    server_identical: int = 0  # the server == CTranslate2 in process (texts)
    server_compared: int = 0
    checked: int = 0  # ours (batch `batch`) == CTranslate2 decoding exactly ours' free tokens (untimed)
    logprob_diffs: list[float] = field(default_factory=list)  # there: |ours - CTranslate2| log-prob per token
    forced_eos: bool = False
    ranges: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)  # sent/s: min, max
    phases: dict[str, float] = field(default_factory=dict)
    footprint: dict[str, Any] = field(default_factory=dict)  # disk, memory, floor (footprint.py)

    def ratios(self, batch: int) -> dict[str, Any]:
        """Ours / CTranslate2 of the same precision (sentences per second, bytes, memory), the token
        counts, and every point's sentences per second."""
        by = {(p.engine, p.batch): p.sentences_per_s for p in self.points}
        out: dict[str, Any] = {}
        for suffix, (ours, theirs) in PAIRS.items():
            out |= {f"ort{suffix}_vs_ct2{suffix}_{self.family}_b{b}": by[ours, b] / by[theirs, b]
                    for b in (1, batch)}
        for server, (_, reference) in SERVERS.items():
            suffix = server.removeprefix(SERVER).replace(" ", "_")
            out |= {f"server{suffix}_vs_ct2{suffix}_{self.family}_c{b}": by[server, b] / by[reference, b]
                    for b in (1, batch)}
        out |= {f"ort_int8_vs_ort_b{b}": by[ORT_INT8, b] / by[ORT, b] for b in (1, batch)}
        foot = self.footprint
        for suffix, (ours, theirs) in PAIRS.items() if foot else ():
            out[f"disk{suffix}_vs_ct2{suffix}"] = foot["disk_bytes"][ours] / foot["disk_bytes"][theirs]
            warm = {e: foot["memory_mib"][e]["warm"]["rss_mib"] for e in (ours, theirs)}
            out[f"memory{suffix}_vs_ct2{suffix}"] = warm[ours] / warm[theirs]
        out |= {"identical_tokens": self.identical, "compared": self.compared,
                "int8_identical_tokens": self.int8_identical,
                "ct2_int8_identical_tokens": self.ct2_int8_identical,
                "server_identical_tokens": self.server_identical, "server_compared": self.server_compared,
                "logprob_checked": self.checked,
                "logprob_diff_max": max(self.logprob_diffs, default=float("nan"))}
        points = {f"{p.engine} {p.batch}": round(p.sentences_per_s, 3) for p in self.points}
        return out | {"sentences_per_s": points, **foot}


# ----- phases ---------------------------------------------------------------------------------------
def convert(hf_dir: Path, out: Path, log=print) -> tuple[Path, dict[str, float]]:
    """Our import (fp32 and int8: random weights' near-ties flip under int8 rounding, so the variant is held
    to its log-prob drift, not greedy agreement) and CTranslate2's conversions of the model directory (both
    CLIs, run at once); the bundle and the seconds until each was done."""
    seconds = {}
    bundle = out / "bundle"
    converter = str(Path(sys.executable).parent / "ct2-transformers-converter")
    commands = {
        "import": [sys.executable, "-m", "export.pretrained", "--model", str(hf_dir), "--out", str(bundle),
                   "--quantize", "int8", "--force", "--int8-min-agreement", "0"],
        **{f"ct2_convert_{q}": [converter, "--model", str(hf_dir), "--output_dir", str(out / d),
                                "--quantization", q, "--force"] for q, d in CT2_DIRS.items()},
    }
    start = time.perf_counter()  # all three at once: each spends seconds importing its libraries
    out.mkdir(parents=True, exist_ok=True)
    logs = {phase: out / f"{phase}.log" for phase in commands}
    running = {}
    for phase, command in commands.items():
        with logs[phase].open("w") as stderr:  # the child keeps its own descriptor
            running[phase] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    for phase, proc in running.items():
        if proc.wait() != 0:
            for other in running.values():
                other.kill()
            stderr = logs[phase].read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"{phase} failed ({proc.returncode}):\n{stderr[-3000:]}")
        seconds[phase] = time.perf_counter() - start
        log(f"{phase}: done after {seconds[phase]:.0f} s")
    return bundle, seconds


def add_point(result: Result, point: Point, seconds: list[float]) -> None:
    """The point at the median of its repeats' seconds, and their range in sentences/s."""
    result.points.append(replace(point, seconds=statistics.median(seconds)))
    n = point.sentences
    result.ranges[point.engine, point.batch] = (n / max(seconds), n / min(seconds))


def measure_engines(plan: Plan, procs: dict[str, EngineProcess], ids: list[list[int]], free: int,
                    result: Result) -> list[Output]:
    """Ours and CTranslate2 on the same ids at batch 1 and plan.batch, interleaved; ours' last outputs."""
    for b in (1, plan.batch):
        sources = ids[: plan.single] if b == 1 else ids
        for proc in procs.values():
            proc.time(sources[: min(b, 4)], b)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in procs}
        outputs: dict[str, list[Output]] = {}
        for _ in range(plan.repeats):
            for name, proc in procs.items():
                time.sleep(PAUSE_S)
                seconds, outputs[name] = proc.time(sources, b)
                times[name].append(seconds)
        for name in procs:
            tokens = sum(steps(t, plan.new_tokens) for t, _ in outputs[name])
            add_point(result, Point(name, b, len(sources), tokens, 0.0), times[name])
        for (ours, _), (theirs, _) in zip(outputs[ORT], outputs[CT2], strict=True):
            result.identical += same(ours, theirs, free)
            result.compared += 1
        for attr, (a, b) in (("int8_identical", (ORT_INT8, ORT)), ("ct2_int8_identical", (CT2_INT8, CT2))):
            agree = sum(x == y for (x, _), (y, _) in zip(outputs[a], outputs[b], strict=True))
            setattr(result, attr, getattr(result, attr) + agree)
    return outputs[ORT]


def check_log_probs(plan: Plan, dirs: tuple[Path, Path, Path], ids: list[list[int]], ours: list[Output],
                    free: int, result: Result) -> None:
    """Ours' fp32 tokens and total log-probs (a forced eos adds 0) against CTranslate2 float32 decoding
    `free` tokens (a target prefix is in CTranslate2's tokens, not in its score; ours forces it, adding 0)."""
    decode = Ct2Engine(CT2, FAMILIES[plan.family], dirs[1], dirs[2], plan.threads, free)
    theirs = [out for i in range(0, len(ids), plan.batch) for out in decode(ids[i : i + plan.batch])]
    for (tokens, log_prob), (their_tokens, score) in zip(ours, theirs, strict=True):
        if tokens == their_tokens and tokens:
            result.checked += 1
            result.logprob_diffs.append(abs(log_prob - score) / len(tokens))


def measure_server(plan: Plan, name: str, server: ServerProcess, ct2: EngineProcess, texts: list[str],
                   free: int, result: Result) -> None:
    """A server against CTranslate2 of its precision in process (bench/families/servers.py), into result."""
    runs, identical = compare_server(name, server.address, ct2, texts, plan.new_tokens, plan.batch,
                                     plan.single, plan.repeats, free, FAMILIES[plan.family].languages)
    if name == SERVER:
        result.server_identical, result.server_compared = identical, len(texts)
    for points in runs:
        add_point(result, points[0], [p.seconds for p in points])


def measure_footprint(plan: Plan, bundle: Path, out: Path, hf_dir: Path, ids: list[list[int]],
                      result: Result) -> None:
    """Bytes on disk per variant, memory each engine adds to a fresh process, and the batch-1 floor."""
    disk = {name: variant_bytes(bundle, None if v == "base" else v) for name, v in OURS.items()}
    disk |= {name: ct2_bytes(out / CT2_DIRS[q]) for name, q in THEIRS.items()}
    engine = (plan.family, bundle, out, hf_dir, plan.threads, plan.new_tokens)
    memory = {name: load_memory((name, *engine), ids[: plan.batch]) for name in (*OURS, *THEIRS)}
    bandwidth = read_bandwidth(plan.threads, plan.bandwidth_mib)
    by = {(p.engine, p.batch): p for p in result.points}
    floor = {}
    for name, variant in OURS.items():
        bytes_ = step_bytes(bundle, None if variant == "base" else variant)
        step_ms = 1e3 * by[name, 1].seconds / by[name, 1].tokens  # encoder and Python included
        floor[name] = {"step_bytes": bytes_, "floor_ms": round(bytes_ / bandwidth / 1e6, 3),
                       "step_ms": round(step_ms, 3), "fraction": round(bytes_ / bandwidth / 1e6 / step_ms, 3)}
    result.footprint = {"disk_bytes": disk, "shared_bytes": shared_bytes(bundle), "memory_mib": memory,
                        "read_bandwidth_gb_s": round(bandwidth, 1), "batch1_floor": floor}


def run(plan: Plan = Plan(), out: Path = Path("runs/bench-marian"), log=print) -> Result:
    """Build (or reuse), import, convert, then measure; returns the points and checks."""
    result = Result(family=plan.family)
    start = time.perf_counter()
    hf_dir = family_dir(out / "hf", plan.family, plan.shape, log=log)
    result.phases["build"] = time.perf_counter() - start
    bundle, seconds = convert(hf_dir, out, log)
    result.phases |= seconds
    manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    result.forced_eos = bool(manifest.get("generation", {}).get("forced_eos_at_limit", False))
    free = plan.new_tokens - result.forced_eos
    texts = [FAMILIES[plan.family].prefix + t for t in source_texts(plan.shape, plan.sentences)]
    ids = source_ids(hf_dir, texts)
    engine = (plan.family, bundle, out, hf_dir, plan.threads, plan.new_tokens)
    with contextlib.ExitStack() as stack:
        start = time.perf_counter()
        procs = {name: EngineProcess(name, *engine, factory=family_engine) for name in (*OURS, *THEIRS)}
        for proc in procs.values():
            stack.callback(proc.close)
        ours = measure_engines(plan, procs, ids, free, result)
        for name in OURS:
            procs[name].close()
        result.phases["engines"] = time.perf_counter() - start
        log(f"engines: {result.phases['engines']:.0f} s")
        start = time.perf_counter()
        for name, (ours_engine, reference) in SERVERS.items():
            with ServerProcess(bundle, "continuous", ["--variant", OURS[ours_engine]]) as server:
                measure_server(plan, name, server, procs[TEXT_ENGINES[reference]], texts, free, result)
        result.phases["server"] = time.perf_counter() - start
        log(f"servers: {result.phases['server']:.0f} s")
    start = time.perf_counter()  # every engine process and the server are gone
    check_log_probs(plan, (bundle, out, hf_dir), ids, ours, free, result)
    result.phases["check"] = time.perf_counter() - start
    start = time.perf_counter()
    measure_footprint(plan, bundle, out, hf_dir, ids, result)
    result.phases["footprint"] = time.perf_counter() - start
    return result


LABELS = {ORT: "ours fp32: `Runner` (ONNX Runtime), ids, static batch",
          CT2: "CTranslate2 float32, ids, static batch",
          ORT_INT8: "ours int8: `Runner`, ids, static batch", CT2_INT8: "CTranslate2 int8, ids, static batch",
          SERVER: "ours fp32: the server (gRPC, text), closed loop",
          CT2_TEXT: "CTranslate2 float32 in process, text, static batch",
          SERVER_INT8: "ours int8: the server (`--variant int8`), closed loop",
          CT2_TEXT_INT8: "CTranslate2 int8 in process, text, static batch"}


def table(result: Result, batch: int) -> str:
    """Markdown: median sentences/s (tokens/s) and their range over repeats at 1 and `batch` per engine."""
    by = {(p.engine, p.batch): p for p in result.points}
    head = " sent/s (tok/s), range over repeats |"
    lines = [f"| engine | 1:{head} {batch}:{head}", "|---|---|---|"]
    for name, label in LABELS.items():
        cells = []
        for b in (1, batch):
            (low, high), p = result.ranges[name, b], by[name, b]
            cells.append(f"{p.sentences_per_s:.2f} ({p.tokens_per_s:.0f}), {low:.2f}-{high:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def checks(result: Result, plan: Plan) -> str:
    """The token checks in words."""
    n = plan.new_tokens
    limit = f"eos forced as token {n} in ours: compared on its {n - 1} free tokens" if result.forced_eos \
        else f"{n} new tokens at most"
    worst = max(result.logprob_diffs, default=float("nan"))
    return (f"tokens ({limit}): ours = CTranslate2 on {result.identical} of {result.compared} decodes "
            "(float32); "
            f"our int8 = our fp32 on {result.int8_identical}, CTranslate2 int8 = its float32 on "
            f"{result.ct2_int8_identical} of {result.compared}; "
            f"the server = CTranslate2 on {result.server_identical} of {result.server_compared} texts; "
            f"CTranslate2 decoding exactly {n - result.forced_eos} tokens: the same tokens on "
            f"{result.checked} of {plan.sentences}, total log-probs within {worst:.2g} per token")


# the per-family goals: ratio key (family and batch filled in) -> (">=" or "<=", the goal)
GOALS = {"ort_int8_vs_ct2_int8_{family}_b1": (">=", 2.5),
         "ort_int8_vs_ct2_int8_{family}_b{batch}": (">=", 1.3), "ort_vs_ct2_{family}_b1": (">=", 1.0),
         "ort_vs_ct2_{family}_b{batch}": (">=", 1.0),
         "memory_vs_ct2": ("<=", 1.2), "memory_int8_vs_ct2_int8": ("<=", 1.2)}


def goals(ratios: dict[str, Any], family: str, batch: int) -> dict[str, tuple[str, float, float, bool]]:
    """Each goal's ratio key -> (its comparison, the goal, the ratio, whether it meets the goal)."""
    out = {}
    for template, (op, goal) in GOALS.items():
        key = template.format(family=family, batch=batch)
        value = ratios[key]
        out[key] = (op, goal, value, value >= goal if op == ">=" else value <= goal)
    return out


def goal_lines(checked: dict[str, tuple[str, float, float, bool]]) -> str:
    """The goal checks in words, one a line."""
    return "\n".join(f"goal {key} {op} {goal}: {value:.3f}, {'met' if met else 'NOT met'}"
                     for key, (op, goal, value, met) in checked.items())
