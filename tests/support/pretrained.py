"""Bundles of format 2 made in the tests, as export/pretrained.py makes them of imported checkpoints:
the tiny bundle's graphs with another tokenizer (tiny SentencePiece models trained here, or a
tokenizers file), a `generation` and a `languages` object, the file hashes recomputed; texts to
compare tokenizers on; and the log-probs of a decoder input read straight from the ONNX graphs."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import sentencepiece

from interface.generation import FORMAT_WITH_GENERATION
from interface.names import (
    ATTENTION_MASK,
    ENCODER_ATTENTION_MASK,
    INPUT_IDS,
    LOGPROBS,
    POSITION_IDS,
    encoder_outputs,
    past_name,
)
from service.runtime.model.bundle import file_sha256

WORDS = ["the", "cat", "saw", "Anna", "big", "red", "apples", "on", "day", "we", "Der", "Hund", "sah",
         "rote", "Äpfel", "am", "Tag", "wir", "très", "café"]
PUNCTUATION = [".", ",", "!", "?", ";", ":", "...", "-", "'", '"', "(", ")", "%"]
UNKNOWN = ["日本語", "ø", "😀", "Ω", "ß", "\u00a0", "ﬁ", "№", "€", "ŋ"]  # mostly not in the models
M2M_CODES = ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"]  # transformers' M2M100 "wmt21" codes


def sentences(n: int, seed: int) -> list[str]:
    """Training sentences: words, numbers and punctuation of the tiny task's kind."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
        if rng.random() < 0.6:
            words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 99999)))
        out.append(" ".join(words) + rng.choice([*PUNCTUATION[:4], ""]))
    return out


def hard_texts(n: int, seed: int, extra: Sequence[str] = ()) -> list[str]:
    """Texts that exercise a tokenizer: unknown characters, repeated and odd whitespace, digits,
    punctuation, leading and trailing spaces, and the strings of `extra` (e.g. special tokens)."""
    rng = random.Random(seed)
    pool = [*WORDS, *PUNCTUATION, *UNKNOWN, *extra, "0", "42", "2024", "3.14", "1,000,000"]
    spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", ""]
    out = ["  the   cat  ", "\tthe\ncat", "ÄÄÄ 000 ...", "日本語", "the▁cat", "a-b_c", "¿Qué?", "x" * 40]
    while len(out) < n:
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 10))]
        out.append(rng.choice(["", " ", "  "]) + "".join(p + rng.choice(spaces) for p in parts))
    return out


def train_sentencepiece(path: Path, texts: Iterable[str], vocab_size: int = 80, model_type: str = "unigram",
                        user_pieces: Sequence[str] = ()) -> Path:
    """A SentencePiece model trained on `texts` (unk 0, eos 1, no bos or pad), written to `path`."""
    prefix = path.with_name(path.name + ".train")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts)), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0, unk_id=0, eos_id=1, bos_id=-1, pad_id=-1,
        user_defined_symbols=list(user_pieces), minloglevel=2)
    prefix.with_name(prefix.name + ".model").replace(path)
    prefix.with_name(prefix.name + ".vocab").unlink()
    return path


def pieces_of(models: Iterable[Path]) -> list[str]:
    """The pieces of SentencePiece models, each once, in order."""
    seen: dict[str, None] = {}
    for model in models:
        sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
        seen.update((sp.id_to_piece(i), None) for i in range(sp.get_piece_size()))
    return list(seen)


def vocabulary(pieces: Sequence[str], first: Sequence[str], last: Sequence[str], seed: int) -> dict[str, int]:
    """piece -> id: `first` from 0, then the other pieces shuffled (ids unrelated to the models'), then
    `last`."""
    rest = [p for p in pieces if p not in first and p not in last]
    random.Random(seed).shuffle(rest)
    return {p: i for i, p in enumerate([*first, *rest, *last])}


def cpu_session(path: Path) -> ort.InferenceSession:
    """A one-thread CPU session, in ORT's process-wide pool once a Runner has made one (ORT then refuses
    sessions with their own)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except RuntimeError as e:
        if "global thread pool" not in str(e):
            raise
        options.use_per_session_threads = False
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def m2m100_tokenizer(vocab: Path, spm: Path) -> Any:
    """transformers' M2M100Tokenizer of these files with its language tokens as special tokens, as the
    hub's tokenizer_config.json makes them (they take the ids after the vocabulary)."""
    from transformers import M2M100Tokenizer

    return M2M100Tokenizer(str(vocab), str(spm), language_codes="wmt21",
                           additional_special_tokens=[f"__{c}__" for c in M2M_CODES])


def write_format2_bundle(base: Path, out: Path, files: Mapping[str, bytes], tokenizer: dict[str, Any], *,
                         generation: dict[str, Any] | None = None, languages: dict[str, Any] | None = None,
                         special: dict[str, int] | None = None,
                         drop: Sequence[str] = ("tokenizer.json",)) -> Path:
    """A copy of bundle `base` at `out` in format 2: `drop` removed, `files` written, the given objects
    stated in bundle.json and every file's hash recomputed."""
    shutil.copytree(base, out)
    manifest = json.loads((out / "bundle.json").read_text(encoding="utf-8"))
    for name in drop:
        (out / name).unlink()
        del manifest["files"][name]
    for name, data in files.items():
        (out / name).write_bytes(data)
    manifest["files"].update({name: {"sha256": file_sha256(out / name), "bytes": (out / name).stat().st_size}
                              for name in files})
    manifest.update(format_version=FORMAT_WITH_GENERATION, tokenizer=tokenizer)
    for key, value in (("generation", generation), ("languages", languages), ("special_tokens", special)):
        if value is not None:
            manifest[key] = value
    (out / "bundle.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return out


class GraphReference:
    """The next-token log-probs of a "concat" bundle's graphs run once over a whole decoder input (no
    cache): the reference of the decode batch, with greedy decoding and sequence scores on top."""

    def __init__(self, bundle: Path) -> None:
        manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
        assert manifest["onnx"]["kv_cache"] == "concat", "the reference runs many tokens at once"
        model = manifest["model"]
        self.layers, self.heads = model["n_decoder_layers"], model["n_heads"]
        self.d_head = model.get("head_dim") or model["d_model"] // self.heads
        self.encoder, self.decoder = (cpu_session(bundle / f) for f in ("encoder.onnx", "decoder.onnx"))

    def logprobs(self, source: Sequence[int], decoder_ids: Sequence[int]) -> np.ndarray:
        """(len(decoder_ids), V): the log-probs of the token after each decoder input."""
        src = np.array([source], np.int64)
        mask = np.ones_like(src)
        cross = self.encoder.run(encoder_outputs(self.layers), {INPUT_IDS: src, ATTENTION_MASK: mask})
        n = len(decoder_ids)
        feeds = {INPUT_IDS: np.array([decoder_ids], np.int64), ATTENTION_MASK: np.ones((1, n), np.int64),
                 POSITION_IDS: np.arange(n, dtype=np.int64)[None], ENCODER_ATTENTION_MASK: mask}
        empty = np.zeros((1, self.heads, 0, self.d_head), np.float32)
        for i in range(self.layers):
            for j, kv in enumerate(("key", "value")):
                feeds[past_name(i, "decoder", kv)] = empty
                feeds[past_name(i, "encoder", kv)] = cross[2 * i + j]
        return self.decoder.run([LOGPROBS], feeds)[0][0]

    def score(self, source: Sequence[int], decoder_ids: Sequence[int], skip: int = 0) -> float:
        """Sum of the log-probs of decoder_ids[1:] (each given the ones before), the first `skip` left out."""
        logp = self.logprobs(source, decoder_ids[:-1])
        return float(sum(logp[i, t] for i, t in enumerate(decoder_ids[1:]) if i >= skip))

    def greedy(self, source: Sequence[int], start: int, eos: int, max_new: int,
               forced: int | None = None) -> tuple[list[int], float]:
        """Greedy tokens (eos included when reached) and their log-prob sum; a forced first token adds 0."""
        ids, total = [start], 0.0
        for step in range(max_new):
            logp = self.logprobs(source, ids)[-1]
            if step == 0 and forced is not None:
                token = forced  # adds 0, as transformers' ForcedBOSTokenLogitsProcessor
            else:
                token = int(logp.argmax())
                total += float(logp[token])
            ids.append(token)
            if token == eos:
                break
        return ids[1:], total


def restated(bundle: Path, out: Path, **generation) -> Path:
    """A copy of a bundle whose `generation` object has these values (bundle.json is not hashed)."""
    shutil.copytree(bundle, out)
    manifest = json.loads((out / "bundle.json").read_text(encoding="utf-8"))
    manifest["generation"].update(generation)
    (out / "bundle.json").write_text(json.dumps(manifest), encoding="utf-8")
    return out
