"""Verify the fp16 variant against the PyTorch model on ONNX Runtime's CPU provider.

The same checks as the fp32 graphs (export/verify/base.py), with tolerances for fp16 arithmetic:

- every verification case (batch 1..5, source lengths 1..64, empty and non-empty caches, one and
  several new tokens; for an in-place decoder rows of different lengths with garbage beyond each
  row's cache and source) compares the encoder's K/V, the log-probabilities (over the whole
  vocabulary), their log-normalizer (computed in fp16, output as float32), the updated cache and the
  alignment weights with PyTorch's float32 values: the largest absolute difference of each must
  stay within `FP16_ATOL`;
- greedy decoding of the verification sources with the fp16 graphs (the in-place cache bound as
  past and present, as served) must give PyTorch's tokens, except where the two decodings part at
  a near-tie: PyTorch's own token leads the fp16 graph's choice by at most `TIE_MARGIN` in
  log-probability there. Every such divergence is counted in the report (`greedy_near_ties`).

The graphs take fp16 caches; the float32 inputs the shared verification code builds are cast to
each input's type on the way in (`CastInputs`), and outputs are compared in float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from export.verify.base import ParityError, check_graphs, compare_case, greedy_agreement, open_session
from export.verify.cases import DEFAULT_CASES, Case, fit_case
from interface.generation import GenerationSpec
from model.transformer import Transformer, padding_mask

# max abs difference allowed per compared output (fp32 graphs: 1e-4); the default model's worst
# cases, measured on 24 cases, are about a third of these (docs/export.md)
FP16_ATOL = {"encoder": 5e-2, "logprobs": 5e-2, "log_normalizer": 5e-2, "present": 2e-2,
             "cross_attentions": 5e-3}
# greedy may part from PyTorch only where its own token leads ours by this little: a flip needs the
# errors of both tokens' log-probs (each within the tolerance) to close the gap
TIE_MARGIN = 2 * FP16_ATOL["logprobs"]
_NP_TYPES = {"tensor(float16)": np.float16, "tensor(float)": np.float32}


class CastInputs:
    """An ONNX Runtime session whose float inputs are cast to the graph's own float type first."""

    def __init__(self, session: ort.InferenceSession) -> None:
        """Wrap session."""
        self.session = session
        self.types = {i.name: _NP_TYPES.get(i.type) for i in session.get_inputs()}

    def get_inputs(self) -> list[Any]:
        """The session's inputs."""
        return self.session.get_inputs()

    def get_outputs(self) -> list[Any]:
        """The session's outputs."""
        return self.session.get_outputs()

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """session.run with float feeds cast to the input types."""
        cast = {k: v.astype(self.types[k]) if v.dtype.kind == "f" and self.types.get(k) else v
                for k, v in feeds.items()}
        return self.session.run(output_names, cast)


@torch.inference_mode()
def tie_margin(model: Transformer, source: list[int], ours: list[int], ref: list[int]) -> float:
    """At the first step where two greedy decodings part: PyTorch's log-prob lead of its token over ours."""
    cfg = model.cfg
    parted = (i for i, (a, b) in enumerate(zip(ours, ref, strict=False)) if a != b)
    step = next(parted, min(len(ours), len(ref)))
    src = torch.tensor([source])
    mask = padding_mask(src, cfg.pad_id)
    prefix = torch.tensor([[cfg.start_id, *ref[:step]]])
    logp = model.decode(prefix, model.cross_kv(model.encode(src, mask)), mask)[0][0, -1]
    ours_next = ours[step] if step < len(ours) else cfg.eos_id
    ref_next = ref[step] if step < len(ref) else cfg.eos_id
    return float(logp[ref_next] - logp[ours_next])


def verify_fp16(
    bundle_dir: Path, model: Transformer, sources: list[list[int]], encoder: str, decoder: str,
    cases: tuple[Case, ...] = DEFAULT_CASES, seed: int = 0, rules: GenerationSpec | None = None,
) -> dict[str, Any]:
    """Check the fp16 graphs of bundle_dir against model on the CPU provider; raise ParityError on failure."""
    model = model.eval()
    paths = [bundle_dir / encoder, bundle_dir / decoder]
    check_graphs(paths)
    enc, dec = (open_session(p) for p in paths)
    report: dict[str, Any] = {f"{k}_max_diff": 0.0 for k in FP16_ATOL}
    rng = np.random.default_rng(seed)
    for case in (fit_case(c, model.cfg.max_len) for c in cases):
        diffs = compare_case(CastInputs(enc), CastInputs(dec), model, case, rng, scaled=False)  # absolute
        for k, d in diffs.items():
            report[f"{k}_max_diff"] = max(report[f"{k}_max_diff"], d)
        worst = max(diffs, key=lambda k: diffs[k] / FP16_ATOL[k])
        if diffs[worst] > FP16_ATOL[worst]:
            raise ParityError(f"fp16 {worst} differs by {diffs[worst]:.3g} > {FP16_ATOL[worst]} at {case}")
    same, bad = greedy_agreement(enc, dec, model, sources, rules=rules)
    margins = [tie_margin(model, source, ours, ref) for ours, ref, source in bad]
    if any(m > TIE_MARGIN for m in margins):
        ours, ref, _ = bad[int(np.argmax(margins))]
        raise ParityError(f"fp16 greedy decoding differs beyond a near-tie (PyTorch's token leads by "
                          f"{max(margins):.3g} > {TIE_MARGIN}): ONNX {ours} vs PyTorch {ref}")
    report |= {"cases": len(cases), "atol": dict(FP16_ATOL),
               "greedy_sources": len(sources), "greedy_identical": same, "greedy_near_ties": len(bad),
               "greedy_tie_margin": TIE_MARGIN}
    return report
