"""Whole documents against the same sentences sent one request each, the sentence cache on and off, and the
time to the first segment of a streamed document, on real servers with the default flags.

    python -m bench.documents [--bundle DIR] [--kib 50] [--concurrency 32] [--pages 12]

The bundle is the default model, then the opus-mt-shaped one bench.marian imported when there is one
(bench/repository/models.py `large_bundle`); `--bundle` measures that one alone. Per bundle:

1. A plain-text document of about `--kib` KiB: paragraphs of distinct sentences (the default model's
   held-out sources, then sentences of its training distribution; the opus-mt shape's synthetic sources,
   bench/families/marian.py). Its segments, as the server's parser cuts it, are "the sentences".
2. Documents: a fresh server translates the document in one TranslateDocumentStream call: sentences/s, the
   time to its first part and to its end. Sentences: another fresh server translates the same sentences
   one Translate request each, `--concurrency` at once: sentences/s. A fresh server each, so neither run
   finds the other's sentences in the sentence cache. The goal: documents' sentences/s at least 1.0x.
3. Boilerplate: `--pages` pages, each a few sentences of its own between a header and a footer that every
   page shares (the repeated boilerplate of a site), translated one page after the other on a server with
   the default sentence cache, and on one with `--sentence-cache-bytes 0`: pages/s of each, their ratio, and
   the cache's hits and misses (its metrics).

The last line printed is a JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common.serverproc import ServerProcess
from bench.common.translator import closed_loop_at, open_channel, wait_ready
from bench.common.workload import DEFAULT_BUNDLE, held_out_sources
from bench.repository.models import large_bundle
from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.config import ServerConfig
from service.documents.formats import parse

TIMEOUT_S = 1800.0  # one document call: bounded, far beyond what a 50 KB document takes here
PARAGRAPH = (3, 8)  # sentences per paragraph
MARIAN_TOKENS = 48  # the opus-mt shape's output cap (`capped`)


def sources_of(bundle: Path, n: int) -> list[str]:
    """n distinct source sentences the model reads: for ours, the held-out sources, then sentences of its
    training distribution (textnorm.corpus, seeded); for the opus-mt shape, its synthetic sources."""
    if (Path(bundle).parent / "hf").is_dir():  # bench.marian's <x>/bundle beside <x>/hf
        from bench.families.marian import FULL
        from bench.families.text import source_texts

        return list(dict.fromkeys(source_texts(FULL, 2 * n, seed=7)))[:n]
    from textnorm.corpus import sentence, word_lists

    out = dict.fromkeys(held_out_sources())
    rng, words = random.Random(7), word_lists(0)[0]
    while len(out) < n:
        out[sentence(rng, words)[0]] = None
    return list(out)[:n]


def document(sentences: Sequence[str], kib: float, seed: int = 0) -> str:
    """Paragraphs of the sentences (each ending with a full stop), about `kib` KiB of UTF-8."""
    rng, out, size, i = random.Random(seed), [], 0, 0
    while size < kib * 1024:
        k = rng.randint(*PARAGRAPH)
        paragraph = " ".join(_sentence(sentences[(i + j) % len(sentences)]) for j in range(k))
        out.append(paragraph)
        size += len(paragraph.encode("utf-8")) + 2
        i += k
    return "\n\n".join(out) + "\n"


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text[-1:] in ".!?" else text + "."


def capped(bundle: Path) -> int:
    """The output cap of every sentence: 0 (the model's own) for ours; for the opus-mt shape, whose random
    weights never end a sentence by themselves, MARIAN_TOKENS (about a real translation's length)."""
    return MARIAN_TOKENS if (Path(bundle).parent / "hf").is_dir() else 0


async def streamed_document(address: str, text: str, max_tokens: int) -> dict[str, float]:
    """One TranslateDocumentStream call: segments, seconds to the first part and to the end."""
    request = pb.TranslateDocumentRequest(document=text, format=pb.DOCUMENT_FORMAT_TEXT,
                                          options=pb.TranslateOptions(max_output_tokens=max_tokens))
    async with open_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        start, first, segments, parts = time.perf_counter(), None, 0, []
        async for message in stub.TranslateDocumentStream(request, timeout=TIMEOUT_S):
            if message.HasField("start"):
                segments = message.start.segments
            else:
                first = first or time.perf_counter() - start
                parts.append(message.part.text)
        total = time.perf_counter() - start
    if not parts:
        raise RuntimeError("the document stream sent no part")
    return {"segments": segments, "first_part_s": round(first or total, 3), "total_s": round(total, 3),
            "sentences_per_s": round(segments / total, 2), "output_bytes": len("".join(parts).encode())}


async def pages(address: str, texts: Sequence[str], max_tokens: int) -> float:
    """Seconds to translate the pages one TranslateDocument call after the other."""
    options = pb.TranslateOptions(max_output_tokens=max_tokens)
    async with open_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        start = time.perf_counter()
        for text in texts:
            request = pb.TranslateDocumentRequest(document=text, format=pb.DOCUMENT_FORMAT_TEXT,
                                                  options=options)
            await stub.TranslateDocument(request, timeout=TIMEOUT_S)
        return time.perf_counter() - start


def boilerplate_pages(sentences: Sequence[str], count: int) -> list[str]:
    """`count` pages: a shared header (4 sentences) and footer (8), and 3 sentences of each page's own."""
    shared = [_sentence(s) for s in sentences[:12]]
    own = [_sentence(s) for s in sentences[12:]]
    return ["\n\n".join([" ".join(shared[:4]), " ".join(own[3 * p: 3 * p + 3]), " ".join(shared[4:])]) + "\n"
            for p in range(count)]


def serve(bundle: Path, extra: Sequence[str] = ()) -> ServerProcess:
    """A server of the bundle with the default flags (continuous batching, the default sentence cache,
    which ServerProcess turns off unless told) and `extra`."""
    default = str(ServerConfig().sentence_cache_bytes)
    return ServerProcess(bundle, "continuous", ["--sentence-cache-bytes", default, *extra])


async def _ready(server: ServerProcess) -> None:
    await wait_ready(server.address)


def measure(bundle: Path, kib: float, concurrency: int, page_count: int) -> dict:
    """Every figure of one bundle (see the module docstring)."""
    text = document(sources_of(bundle, 4000), kib)
    sentences = [s.text.strip() for s in parse(text, "text", "en").segments]
    cap = capped(bundle)
    with serve(bundle) as server:
        asyncio.run(_ready(server))
        streamed = asyncio.run(streamed_document(server.address, text, cap))
    with serve(bundle) as server:
        asyncio.run(_ready(server))
        start = time.perf_counter()
        records = asyncio.run(closed_loop_at(server.address, sentences, concurrency, len(sentences),
                                             max_output_tokens=cap))
        took = time.perf_counter() - start
    failed = sum(r.code != "OK" for r in records)
    one_each = {"sentences": len(sentences), "failed": failed, "total_s": round(took, 3),
                "sentences_per_s": round(len(sentences) / took, 2)}
    site = boilerplate_pages(sources_of(bundle, 12 + 3 * page_count), page_count)
    cache: dict[str, float] = {}
    for label, extra in (("on", []), ("off", ["--sentence-cache-bytes", "0"])):
        with serve(bundle, extra) as server:
            asyncio.run(_ready(server))
            took = asyncio.run(pages(server.address, site, cap))
            scraped = server.scrape()
        cache[f"pages_per_s_{label}"] = round(page_count / took, 3)
        if label == "on":
            cache["hits"] = scraped.get("translator_sentence_cache_hits_total", 0.0)
            cache["misses"] = scraped.get("translator_sentence_cache_misses_total", 0.0)
    return {"bundle": str(bundle), "max_output_tokens": cap, "document_bytes": len(text.encode()),
            "document": streamed,
            "one_request_each": one_each, "concurrency": concurrency,
            "ratio_document_to_one_each": round(streamed["sentences_per_s"] / one_each["sentences_per_s"], 2),
            "boilerplate": {**cache, "pages": page_count,
                            "ratio_on_to_off": round(cache["pages_per_s_on"] / cache["pages_per_s_off"], 2)}}


def main(argv: Sequence[str] | None = None) -> None:
    """Measure, print each bundle's figures, then one JSON line of all of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, help="one bundle (default: the default model, then the "
                        "opus-mt shape when bench.marian built it)")
    parser.add_argument("--kib", type=float, default=50.0, help="size of the document (KiB)")
    parser.add_argument("--concurrency", type=int, default=32, help="users sending one sentence each")
    parser.add_argument("--pages", type=int, default=12, help="pages of the boilerplate run")
    a = parser.parse_args(argv)
    bundles = [a.bundle] if a.bundle else [DEFAULT_BUNDLE, *filter(None, [large_bundle()])]
    figures = []
    for bundle in bundles:
        figures.append(measure(bundle, a.kib, a.concurrency, a.pages))
        print(json.dumps(figures[-1]), flush=True)
    print(json.dumps({"documents": figures}))


if __name__ == "__main__":
    main()
