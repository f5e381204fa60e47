"""Bundles of older exports that carry a multi-step decoder file (`X.steps.onnx` beside each in-place
decoder, listed in bundle.json and in its weights): they load and serve, and the runtime opens no
session of that file (docs/bundle-format.md)."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from service.assembly import build_runner
from service.config import DEFAULT_BUNDLE, parse_config
from service.domain.types import DecodeOptions
from service.runtime.model import sessions
from service.runtime.model.bundle import load_bundle
from service.runtime.runner import Runner

CPU = "CPUExecutionProvider"
STEPS_FILES = ("decoder.steps.onnx", "decoder.fp16.steps.onnx")  # what the committed bundle still ships
TEXTS = ["Send 4,217 apples.", "The meeting is on 3 May at 10:30."]


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """The file names ONNX Runtime sessions are created from in service/runtime/model/sessions.py, in
    order."""
    names: list[str] = []
    real = ort.InferenceSession

    def recording(path, *args, **kwargs):
        names.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(sessions.ort, "InferenceSession", recording)
    return names


def test_the_default_bundle_lists_multistep_files_and_serves_without_opening_them(opened):
    """The committed default bundle lists decoder.steps.onnx and decoder.fp16.steps.onnx (files, weights,
    host nodes): the server's runner and an fp16 runner open the encoder and decoder only, and decode."""
    manifest = load_bundle(DEFAULT_BUNDLE).manifest
    assert set(STEPS_FILES) <= set(manifest["files"])
    assert all(any(f in graphs for graphs in manifest["weights"].values()) for f in STEPS_FILES)
    options = DecodeOptions(max_output_tokens=24)
    served = build_runner(parse_config(["--bundle", str(DEFAULT_BUNDLE), "--providers", CPU], {}))
    fp16 = Runner(DEFAULT_BUNDLE, providers=[CPU], variant="fp16")
    assert opened == ["encoder.onnx", "decoder.onnx", "encoder.fp16.onnx", "decoder.fp16.onnx"]
    for runner in (served, fp16):
        assert set(runner.sessions.files) == {"encoder", "decoder"}
        hypotheses = runner.translate(TEXTS, options)
        assert all(h[0].text and h[0].tokens for h in hypotheses), hypotheses
    assert len(opened) == 4  # decoding opened nothing more
