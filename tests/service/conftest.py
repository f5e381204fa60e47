"""Servers of the tiny bundle shared by the service tests (in process, on 127.0.0.1, free ports), and
format-2 bundles of the tiny graphs with the tokenizers of imported pretrained models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.pretrained import (
    M2M_CODES,
    m2m100_tokenizer,
    pieces_of,
    sentences,
    train_sentencepiece,
    vocabulary,
    write_format2_bundle,
)
from tests.support.server import server_config


@pytest.fixture(scope="module")
def server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A continuous-batching server of the tiny bundle with the test configuration, per module."""
    with BackgroundServer(server_config(tiny_bundle), runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    """A channel to `server`."""
    with grpc.insecure_channel(server.address) as ch:
        yield ch


# ----- bundles of imported pretrained models (format 2), made from the tiny bundle's graphs -----------
MARIAN_BOS = 299  # an id of the model that no piece has: the decoder must not start from it


@pytest.fixture(scope="session")
def marian_bundle(tmp_path_factory, tiny_concat_bundle: Path) -> Path:
    """A Marian-like bundle: SentencePiece source (unigram) and target (BPE) models, a shuffled vocab.json
    of both with </s> 0, <unk> 1 and <pad> last; the decoder starts from pad; no languages."""
    d = tmp_path_factory.mktemp("marian")
    source = train_sentencepiece(d / "source.spm", sentences(300, 0))
    target = train_sentencepiece(d / "target.spm", sentences(300, 1), vocab_size=70, model_type="bpe")
    vocab = vocabulary(pieces_of([source, target]), ["</s>", "<unk>"], ["<pad>"], seed=0)
    pad = vocab["<pad>"]
    files = {"source.spm": source.read_bytes(), "target.spm": target.read_bytes(),
             "vocab.json": json.dumps(vocab).encode()}
    tokenizer = {"kind": "sentencepiece", "source_model": "source.spm", "target_model": "target.spm",
                 "vocab": "vocab.json"}
    return write_format2_bundle(tiny_concat_bundle, d / "bundle", files, tokenizer,
                                generation={"decoder_start_id": pad, "source_suffix": [0]},
                                special={"pad": pad, "bos": MARIAN_BOS, "eos": 0, "unk": 1})


@pytest.fixture(scope="session")
def m2m_files(tmp_path_factory) -> dict[str, Path]:
    """What an M2M100 checkpoint brings: one SentencePiece model and a fairseq vocab.json without the
    language tokens (its tokenizer adds them after the vocabulary)."""
    d = tmp_path_factory.mktemp("m2m")
    spm = train_sentencepiece(d / "spm.model", sentences(300, 2))
    vocab = vocabulary(pieces_of([spm]), ["<s>", "<pad>", "</s>", "<unk>"], [], seed=1)
    (d / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return {"spm": spm, "vocab": d / "vocab.json"}


@pytest.fixture(scope="session")
def m2m_bundles(tmp_path_factory, tiny_bundle: Path, tiny_concat_bundle: Path, m2m_files) -> dict[str, Path]:
    """M2M100-like bundles of both KV-cache layouts ("inplace", "concat"): vocab.json is the tokenizer's
    get_vocab(), the decoder starts from eos, sources are [language] + pieces + [eos], the target
    language is forced."""
    tok = m2m100_tokenizer(m2m_files["vocab"], m2m_files["spm"])
    files = {"spm.model": m2m_files["spm"].read_bytes(), "vocab.json": json.dumps(tok.get_vocab()).encode()}
    tokenizer = {"kind": "sentencepiece", "source_model": "spm.model", "target_model": "spm.model",
                 "vocab": "vocab.json"}
    languages = {"codes": {c: tok.lang_code_to_id[c] for c in M2M_CODES}, "source_prefix": True,
                 "forced_target": True}
    d = tmp_path_factory.mktemp("m2m-bundles")
    return {layout: write_format2_bundle(base, d / layout, files, tokenizer, languages=languages,
                                         generation={"decoder_start_id": 2, "source_suffix": [2]},
                                         special={"pad": 1, "bos": 0, "eos": 2, "unk": 3})
            for layout, base in (("inplace", tiny_bundle), ("concat", tiny_concat_bundle))}


@pytest.fixture(scope="module")
def m2m_runner(m2m_bundles: dict[str, Path]) -> Runner:
    """CPU runner of the in-place M2M100-like bundle."""
    return Runner(m2m_bundles["inplace"], providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def marian_runner(marian_bundle: Path) -> Runner:
    """CPU runner of the Marian-like bundle."""
    return Runner(marian_bundle, providers=["CPUExecutionProvider"])
