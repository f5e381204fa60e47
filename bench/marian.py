"""An imported Marian model side by side: our engine and server against CTranslate2's own Marian converter.

    python -m bench.marian [--quick] [--out DIR]

1. A random-weight `MarianMTModel` of opus-mt-en-de's shape with made-up SentencePiece tokenizers,
   built offline under `<out>/hf` (bench/marian_build.py; kept for reruns). `--quick`: d_model 64,
   2 + 2 layers, vocabulary 1,000.
2. Imported by `python -m export.pretrained` (default options; the fp32 files on the CPU) into
   `<out>/bundle`, and converted by CTranslate2's `ct2-transformers-converter --quantization float32`
   into `<out>/ct2`, both on every run.
3. Greedy, a fixed number of new tokens (random weights rarely emit eos): our `DecodeOptions
   (max_new_tokens=N)`, CTranslate2's `max_decoding_length=N`; both stop at eos the same way. Where
   the bundle forces eos as the last token allowed (`generation.forced_eos_at_limit`, transformers'
   forced_eos_token_id) ours decodes N - 1 free tokens then eos while CTranslate2 (which has no such
   rule) decodes N: the same N decoder steps, compared on ours' tokens. Tokens are counted as decoder
   steps (eos included).
4. Engines, each in its own process (bench/engine.py `EngineProcess`), same threads, interleaved
   repeats, median: our `Runner` (ONNX Runtime) and CTranslate2 on the same source ids in static
   batches of 1 and `batch`. Then the real server (`python -m service.server --bundle <out>/bundle`,
   default flags; bench/serverproc.py) under bench/loadgen.py's closed loop at concurrency 1 and
   `batch` against CTranslate2 in process on the same texts (SentencePiece in, text out).

Prints the markdown table, the token checks, and last a JSON object of the ratios (higher is better
for ours) with the identical-token counts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.engine import EngineProcess, Point
from bench.loadgen import TIMEOUT_S, Record, closed_loop, open_channel, summarize
from bench.marian_build import FULL, QUICK, MarianShape, marian_dir, source_texts
from bench.serverproc import ServerProcess
from bench.workload import PAUSE_S
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc

Output = tuple[list[int], float]  # generated ids (no eos), total log-prob
ORT, CT2, SERVER, CT2_TEXT = "onnxruntime", "ctranslate2", "server", "ctranslate2 text"


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    shape: MarianShape = FULL
    sentences: int = 96  # texts; batch `batch` and concurrency `batch` take them all
    single: int = 32  # the first texts, for batch 1 and concurrency 1
    batch: int = 32
    new_tokens: int = 32
    repeats: int = 7
    threads: int = 2


QUICK_PLAN = Plan(shape=QUICK, sentences=32, single=8, repeats=2)


@dataclass
class Result:
    """Points, token checks and phase timings of a run."""

    points: list[Point] = field(default_factory=list)
    identical: int = 0  # ours == CTranslate2 (ids, both batch sizes)
    compared: int = 0
    server_identical: int = 0  # the server == CTranslate2 in process (texts)
    server_compared: int = 0
    checked: int = 0  # ours (batch `batch`) == CTranslate2 decoding exactly ours' free tokens (untimed)
    logprob_diffs: list[float] = field(default_factory=list)  # there: |ours - CTranslate2| log-prob per token
    forced_eos: bool = False
    ranges: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)  # sent/s: min, max
    phases: dict[str, float] = field(default_factory=dict)

    def ratios(self, batch: int) -> dict[str, float]:
        """Ours / CTranslate2 sentences per second, and the token counts."""
        by = {(p.engine, p.batch): p.sentences_per_s for p in self.points}
        out = {f"ort_vs_ct2_marian_b{b}": by[ORT, b] / by[CT2, b] for b in (1, batch)}
        out |= {f"server_vs_ct2_marian_c{b}": by[SERVER, b] / by[CT2_TEXT, b] for b in (1, batch)}
        return out | {"identical_tokens": self.identical, "compared": self.compared,
                      "server_identical_tokens": self.server_identical,
                      "server_compared": self.server_compared}


# ----- the engines, each in its own process (module-level: EngineProcess's child imports it) -----
def marian_engine(name: str, bundle: Path, ct2_dir: Path, hf_dir: Path, threads: int, new_tokens: int):
    """A decoder taking a batch of source ids (or, CTranslate2 only, texts) to [(ids, log-prob)]."""
    if name == ORT:
        from service.domain.types import DecodeOptions
        from service.runtime.runner import Runner

        runner = Runner(bundle, intra_op_threads=threads)
        options = DecodeOptions(max_new_tokens=new_tokens)

        def ours(batch: list[list[int]]) -> list[Output]:
            """Greedy through the service's decode batch."""
            hyps = runner.translate(batch, options, max_rows=len(batch))
            return [(h[0].tokens, h[0].log_prob) for h in hyps]
        return ours
    if name == CT2:
        import ctranslate2
        import sentencepiece

        translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=threads,
                                            inter_threads=1, compute_type="float32")
        vocab = json.loads((ct2_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
        index = {t: i for i, t in enumerate(vocab)}
        source = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
        target = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "target.spm"))

        def theirs(batch: list[list[int]] | list[str]) -> list[Output]:
            """Greedy in CTranslate2 on ids (as vocabulary strings) or texts (SentencePiece in, text out)."""
            texts = bool(batch) and isinstance(batch[0], str)
            tokens = ([[*source.encode(t, out_type=str), "</s>"] for t in batch] if texts
                      else [[vocab[i] for i in ids] for ids in batch])
            results = translator.translate_batch(  # length_penalty 0: the score is the total log-prob
                tokens, beam_size=1, max_batch_size=len(tokens), max_decoding_length=new_tokens,
                return_scores=True, length_penalty=0.0)
            for r in results if texts else ():
                target.decode_pieces(r.hypotheses[0])  # the text a user would get (timed, not kept)
            return [([index[t] for t in r.hypotheses[0]], r.scores[0]) for r in results]
        return theirs
    raise ValueError(f"unknown engine {name!r}")


def steps(tokens: list[int], new_tokens: int) -> int:
    """Decoder steps that generated these tokens (and an eos after them, unless at the limit)."""
    return min(len(tokens) + 1, new_tokens)


def source_ids(hf_dir: Path, texts: list[str]) -> list[list[int]]:
    """MarianTokenizer's ids of the texts (+ eos): source SentencePiece pieces through vocab.json."""
    import sentencepiece

    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
    unk, eos = vocab["<unk>"], vocab["</s>"]
    return [[vocab.get(p, unk) for p in sp.encode(t, out_type=str)] + [eos] for t in texts]


def same(ours: list[int], theirs: list[int], free: int) -> bool:
    """Ours equal to CTranslate2's first `free` tokens (all of them unless eos is forced at the limit)."""
    return ours == theirs[:free]


# ----- phases ---------------------------------------------------------------------------------------
def convert(hf_dir: Path, out: Path, log=print) -> tuple[Path, Path, dict[str, float]]:
    """Our import and CTranslate2's conversion of the model directory (both CLIs); their seconds."""
    seconds = {}
    bundle, ct2_dir = out / "bundle", out / "ct2"
    converter = str(Path(sys.executable).parent / "ct2-transformers-converter")
    commands = {
        "import": [sys.executable, "-m", "export.pretrained", "--model", str(hf_dir), "--out", str(bundle),
                   "--force"],
        "ct2_convert": [converter, "--model", str(hf_dir), "--output_dir", str(ct2_dir),
                        "--quantization", "float32", "--force"],
    }
    for phase, command in commands.items():
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{phase} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        seconds[phase] = time.perf_counter() - start
        log(f"{phase}: {seconds[phase]:.0f} s")
    return bundle, ct2_dir, seconds


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
    return outputs[ORT]


def check_log_probs(plan: Plan, dirs: tuple[Path, Path, Path], ids: list[list[int]], ours: list[Output],
                    free: int, result: Result) -> None:
    """Ours' tokens and total log-probs (a forced eos adds 0) against CTranslate2 decoding `free` tokens."""
    decode = marian_engine(CT2, *dirs, plan.threads, free)
    theirs = [out for i in range(0, len(ids), plan.batch) for out in decode(ids[i : i + plan.batch])]
    for (tokens, log_prob), (their_tokens, score) in zip(ours, theirs, strict=True):
        if tokens == their_tokens and tokens:
            result.checked += 1
            result.logprob_diffs.append(abs(log_prob - score) / len(tokens))


async def server_tokens(address: str, texts: list[str], new_tokens: int,
                        concurrency: int = 8) -> list[list[int]]:
    """The server's best hypothesis (ids) for each text, `concurrency` requests at a time."""
    gate = asyncio.Semaphore(concurrency)
    options = pb.TranslateOptions(max_output_tokens=new_tokens)
    async with open_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)

        async def one(text: str) -> list[int]:
            """One unary Translate."""
            async with gate:
                request = pb.TranslateRequest(texts=[text], options=options)
                reply = await stub.Translate(request, timeout=TIMEOUT_S)
            return list(reply.results[0].hypotheses[0].token_ids)
        return list(await asyncio.gather(*(one(t) for t in texts)))


def server_point(records: list[Record], concurrency: int, new_tokens: int) -> Point:
    """A closed-loop run as a Point (every request answered, or an error)."""
    summary = summarize(records)
    if summary.errors:
        raise RuntimeError(f"the server failed requests at concurrency {concurrency}: {summary.errors}")
    tokens = sum(steps([0] * r.out_tokens, new_tokens) for r in records)
    return Point(SERVER, concurrency, summary.ok, tokens, summary.elapsed_s)


def measure_server(plan: Plan, server: ServerProcess, ct2: EngineProcess, texts: list[str], free: int,
                   result: Result) -> None:
    """The server (closed loop) against CTranslate2 in process on the same texts, interleaved."""
    served = asyncio.run(server_tokens(server.address, texts, plan.new_tokens))  # also the warm-up
    _, theirs = ct2.time(texts, plan.batch)
    result.server_identical = sum(same(s, t, free) for s, (t, _) in zip(served, theirs, strict=True))
    result.server_compared = len(texts)
    for c in (1, plan.batch):
        sample = texts[: plan.single] if c == 1 else texts
        runs: dict[str, list[Point]] = {SERVER: [], CT2_TEXT: []}
        for _ in range(plan.repeats):
            time.sleep(PAUSE_S)
            records = asyncio.run(closed_loop(server.address, sample, c, len(sample),
                                              max_output_tokens=plan.new_tokens))
            runs[SERVER].append(server_point(records, c, plan.new_tokens))
            time.sleep(PAUSE_S)
            seconds, outputs = ct2.time(sample, c)
            tokens = sum(steps(t, plan.new_tokens) for t, _ in outputs)
            runs[CT2_TEXT].append(Point(CT2_TEXT, c, len(sample), tokens, seconds))
        for points in runs.values():
            add_point(result, points[0], [p.seconds for p in points])


def run(plan: Plan = Plan(), out: Path = Path("runs/bench-marian"), log=print) -> Result:
    """Build (or reuse), import, convert, then measure; returns the points and checks."""
    result = Result()
    start = time.perf_counter()
    hf_dir = marian_dir(out / "hf", plan.shape, log=log)
    result.phases["build"] = time.perf_counter() - start
    bundle, ct2_dir, seconds = convert(hf_dir, out, log)
    result.phases |= seconds
    manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    result.forced_eos = bool(manifest.get("generation", {}).get("forced_eos_at_limit", False))
    free = plan.new_tokens - result.forced_eos
    texts = source_texts(plan.shape, plan.sentences)
    ids = source_ids(hf_dir, texts)
    engine = (bundle, ct2_dir, hf_dir, plan.threads, plan.new_tokens)
    with contextlib.ExitStack() as stack:
        start = time.perf_counter()
        procs = {name: EngineProcess(name, *engine, factory=marian_engine) for name in (ORT, CT2)}
        for proc in procs.values():
            stack.callback(proc.close)
        ours = measure_engines(plan, procs, ids, free, result)
        procs[ORT].close()
        result.phases["engines"] = time.perf_counter() - start
        log(f"engines: {result.phases['engines']:.0f} s")
        start = time.perf_counter()
        server = stack.enter_context(ServerProcess(bundle, "continuous"))
        result.phases["server_start"] = time.perf_counter() - start
        measure_server(plan, server, procs[CT2], texts, free, result)
        result.phases["server"] = time.perf_counter() - start
        log(f"server: {result.phases['server']:.0f} s")
    start = time.perf_counter()  # every engine process and the server are gone
    check_log_probs(plan, (bundle, ct2_dir, hf_dir), ids, ours, free, result)
    result.phases["check"] = time.perf_counter() - start
    return result


LABELS = {ORT: "ours: `Runner` (ONNX Runtime), ids, static batch", CT2: "CTranslate2, ids, static batch",
          SERVER: "ours: the server (gRPC, text), closed loop",
          CT2_TEXT: "CTranslate2 in process, text, static batch"}


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
    return (f"tokens ({limit}): ours = CTranslate2 on {result.identical} of {result.compared} decodes; "
            f"the server = CTranslate2 on {result.server_identical} of {result.server_compared} texts; "
            f"CTranslate2 decoding exactly {n - result.forced_eos} tokens: the same tokens on "
            f"{result.checked} of {plan.sentences}, total log-probs within {worst:.2g} per token")


def main(argv: list[str] | None = None) -> int:
    """CLI: print the table, the checks, then the JSON ratios."""
    ap = argparse.ArgumentParser(prog="python -m bench.marian", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="d_model 64, 2 + 2 layers, 1,000 tokens")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-marian"),
                    help="where the model, bundle and CTranslate2 directories go (under full/ or quick/)")
    ap.add_argument("--repeats", type=int, help="interleaved repeats per point")
    a = ap.parse_args(argv)
    plan = QUICK_PLAN if a.quick else Plan()
    if a.repeats:
        plan = replace(plan, repeats=a.repeats)
    out = a.out / ("quick" if a.quick else "full")
    result = run(plan, out, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(table(result, plan.batch))
    print(checks(result, plan))
    print("phases (s): " + ", ".join(f"{k} {v:.0f}" for k, v in result.phases.items()), file=sys.stderr)
    ratios = result.ratios(plan.batch)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in ratios.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
