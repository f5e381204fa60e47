"""The cold on-demand load as first-request latency, beside CTranslate2's Translator load time.

A server with `--model-control-mode on-demand` and nothing loaded; per model, one Translate request
timed from its send to its answer (the load, the server's warm-up translation and the request itself),
then a second for comparison, on a connection made before either. CTranslate2 loads its conversion of the
same weights in a fresh process (its import not timed), then translates one short input. Both read
files already in the page cache (each model's files are read once before its timing).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.repository.models import repository_server
from bench.repository.traffic import Target, timed_requests

CT2_TIMEOUT_S = 300.0
CT2_LOAD = """
import json, sys, time
from pathlib import Path
import ctranslate2
folder, threads, new_tokens = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=threads, inter_threads=1,
                                    compute_type="float32")
loaded = time.perf_counter()
vocab = json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))
translator.translate_batch([[*vocab[10:20], "</s>"]], beam_size=1, max_decoding_length=new_tokens)
print(json.dumps({"load_s": loaded - start, "load_and_first_s": time.perf_counter() - start}))
"""


def read_through(folder: Path) -> int:
    """Read every file of a folder once (into the page cache); the bytes read."""
    total = 0
    for path in sorted(Path(folder).iterdir()):
        if path.is_file():
            with path.open("rb") as f:
                while chunk := f.read(1 << 24):
                    total += len(chunk)
    return total


def ct2_load(folder: Path, new_tokens: int, threads: int | None = None) -> dict[str, float]:
    """CTranslate2's Translator load time (s) of a model folder in a fresh process, and with a first
    translation of one short input."""
    read_through(folder)
    args = [str(folder), str(threads or os.cpu_count() or 1), str(new_tokens)]
    done = subprocess.run([sys.executable, "-c", CT2_LOAD, *args], capture_output=True, text=True,
                          timeout=CT2_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"CTranslate2 could not load {folder}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(root: Path, models: dict[str, tuple[Path, int, Path | None]], text: str,
        log: Callable[[str], None] = print, extra: Sequence[str] = ()) -> dict[str, Any]:
    """First and second request latency of each model of the repository at root ({name: (version folder,
    max_output_tokens, CTranslate2 folder or None)}) on one on-demand server, in order; CTranslate2's load
    where a folder is given."""
    out: dict[str, Any] = {}
    with repository_server(root, "on-demand", (), extra) as server:
        before = server.rss_kib() / 1024
        for name, (folder, new_tokens, _) in models.items():
            read_through(folder)
            rss = server.rss_kib() / 1024
            greedy = Target(server.address, name, new_tokens, beam_size=1)  # as CTranslate2's translation
            timings = asyncio.run(timed_requests(greedy, text, 2))
            (first, first_code), (second, second_code) = timings
            out[name] = {"first_request_s": first, "second_request_ms": 1e3 * second,
                         "codes": [first_code, second_code], "first_vs_second": first / second,
                         "rss_added_mib": server.rss_kib() / 1024 - rss, "max_output_tokens": new_tokens}
            log(f"  {name}: first request {first:.2f} s ({first_code}), second {1e3 * second:.0f} ms "
                f"({second_code})")
        out["rss_before_any_load_mib"] = before
    for name, (_, new_tokens, ct2) in models.items():
        if ct2 is None:
            out[name]["ct2"] = None
            log(f"  {name}: no CTranslate2 conversion of these weights: its load time is not measured")
            continue
        figures = ct2_load(ct2, new_tokens)
        out[name]["ct2"] = {"folder": str(ct2), **figures}
        out[name]["first_request_vs_ct2_load"] = out[name]["first_request_s"] / figures["load_s"]
        out[name]["first_request_vs_ct2_load_and_first"] = out[name]["first_request_s"] / figures[
            "load_and_first_s"]
        log(f"  {name}: CTranslate2 loads in {figures['load_s']:.2f} s, {figures['load_and_first_s']:.2f} s "
            "with a first translation")
    return out

