"""The int8 and fp16 variants of imported BART, mBART-50 and Pegasus bundles (HF_MODELS: learned position
tables, embedding LayerNorms, final_logits_bias, pre-LN final LayerNorms, sinusoids): built and verified by
the export, and the int8 variant served through the runner giving the fp32 bundle's greedy tokens on the
texts, or parting from them only at a near-tie (fp32's own token leading by at most twice the largest
log-prob drift the export measured: the int8 rule of tests/export/variants/test_int8.py)."""

from __future__ import annotations

import json

import pytest

from export.verify.fp16 import FP16_ATOL
from export.verify.int8 import Int8Limits
from interface import names
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner
from tests.support.decoding import assert_same_or_near_tie
from tests.support.hf_models import parallel

FAMILIES = ["bart", "mbart", "pegasus"]
LANGUAGES = {"mbart": {"source_language": "en_XX", "target_language": "de_DE"}}
TEXTS = [s for s, _ in parallel(24, 7)]


def manifest(bundle) -> dict:
    """bundle.json."""
    return json.loads((bundle / names.BUNDLE_FILE).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_variants_are_built_and_verified(hf_bundles, name):
    m = manifest(hf_bundles[name])
    assert set(m["variants"]) == {"int8", "fp16"}
    int8, fp16 = m["verification"]["int8"], m["verification"]["fp16"]
    assert int8["greedy_sources"] == 8 and int8["logprob_steps"] > 8
    assert 0 < int8["logprob_max_delta"] <= Int8Limits().logprob_delta  # a broken weight moves it by units
    assert all(fp16[f"{k}_max_diff"] <= tol for k, tol in FP16_ATOL.items())
    assert fp16["greedy_identical"] + fp16["greedy_near_ties"] == 8


@pytest.mark.parametrize("name", FAMILIES)
def test_int8_serves_the_fp32_tokens_or_a_near_tie(hf_bundles, name):
    bundle = hf_bundles[name]
    base = Runner(bundle, providers=["CPUExecutionProvider"], variant="base")
    int8 = Runner(bundle, providers=["CPUExecutionProvider"], variant="int8")
    assert int8.sessions.files["decoder"].name == "decoder.int8.onnx"
    drift = manifest(bundle)["verification"]["int8"]["logprob_max_delta"]
    options = DecodeOptions(beam_size=1, max_output_tokens=20, **LANGUAGES.get(name, {}))
    want = [h[0].tokens for h in base.translate(TEXTS, options)]
    got = [h[0].tokens for h in int8.translate(TEXTS, options)]
    prefix = [base.languages.codes[LANGUAGES[name]["source_language"]]] if name in LANGUAGES else []
    sources = base.encode_texts(TEXTS, prefix)
    same = sum(assert_same_or_near_tie(base, s, a, b, margin=2 * drift)
               for s, a, b in zip(sources, got, want, strict=True))
    assert same >= len(TEXTS) // 2  # most keep fp32's tokens: the near-tie rule is not met by chance
