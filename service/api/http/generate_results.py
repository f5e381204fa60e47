"""generate's n-best, scores, alignment and tokens: translator.v1 Translate's request options and
Hypothesis fields as JSON (generate only: a stream carries one translation as pieces).

Parameters (in `parameters`, or beside `text_input`): `n_best` (an integer >= 1: that many
hypotheses, best first; within the beam), `return_alternatives` (true: n_best alternative
continuations at the first position after `target_prefix`, as translator.v1), `return_scores`,
`return_alignment`, `return_tokens` (booleans). With any of them the answer gains `"hypotheses"`:
one object per hypothesis, best first, with `"text"`, `"token_ids"` and `"finish_reason"`, plus
`"score"` and `"log_prob"` (return_scores), `"alignment"` (return_alignment: one row per target
token over the source tokens) and `"tokens"` (return_tokens: vocabulary strings); and
`"source_token_ids"` (return_alignment or return_tokens) and `"source_tokens"` (return_tokens)
beside it. With several hypotheses asked, `"text_outputs"` lists their texts. `text_output` stays
the best translation. Only conversion here: the scheduler validates the values as for gRPC.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from service.api.kserve_codec import shown
from service.domain.errors import InvalidInput
from service.domain.types import DecodeOptions, Result
from service.runtime.runner import Runner

N_BEST_KEY = "n_best"
FLAGS = ("return_alternatives", "return_scores", "return_alignment", "return_tokens")
KEYS = (N_BEST_KEY, *FLAGS)


@dataclass(frozen=True)
class Extras:
    """What a generate request asks beyond the best text; all unset: a plain generate."""

    n_best: int | None = None
    return_alternatives: bool = False
    return_scores: bool = False
    return_alignment: bool = False
    return_tokens: bool = False

    @property
    def asked(self) -> bool:
        """Whether any is asked (the answer then has `hypotheses`)."""
        return self != Extras()

    @property
    def several(self) -> bool:
        """Whether more than one hypothesis is asked (the answer then has `text_outputs`)."""
        return (self.n_best or 1) > 1 or self.return_alternatives


def pop_extras(parameters: dict[str, Any]) -> Extras:
    """Take generate's own parameters out of `parameters`; InvalidInput naming one of the wrong type."""
    n_best = parameters.pop(N_BEST_KEY, None)
    if n_best is not None and (not isinstance(n_best, int) or isinstance(n_best, bool) or n_best < 1):
        raise InvalidInput(f"parameter {N_BEST_KEY} must be an integer >= 1, got {shown(n_best)}")
    flags = {key: parameters.pop(key, False) for key in FLAGS}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidInput(f"parameter {key} must be true or false, got {shown(value)}")
    return Extras(n_best=n_best, **flags)


def refuse_in_stream(parameters: dict[str, Any]) -> None:
    """generate_stream carries one translation as pieces: InvalidInput for generate's own parameters."""
    given = [key for key in KEYS if key in parameters]
    if given:
        raise InvalidInput(f"parameter {given[0]} is generate's (one JSON answer); generate_stream streams "
                           "the pieces of one translation")


def with_extras(options: DecodeOptions, extras: Extras) -> DecodeOptions:
    """The request's DecodeOptions with n-best, alternatives and alignment as asked."""
    return dataclasses.replace(options, n_best=extras.n_best or options.n_best,
                               return_alternatives=extras.return_alternatives,
                               with_alignment=extras.return_alignment)


def result_fields(result: Result, extras: Extras, runner: Runner) -> dict[str, Any]:
    """The answer's fields beyond model_name, model_version and text_output."""
    if not extras.asked:
        return {}
    hypotheses = []
    for hyp in result.hypotheses:
        entry: dict[str, Any] = {"text": hyp.text, "token_ids": list(hyp.tokens),
                                 "finish_reason": str(hyp.finish_reason)}
        if extras.return_scores:
            entry["score"], entry["log_prob"] = hyp.score, hyp.log_prob
        if extras.return_alignment and hyp.alignment is not None:
            entry["alignment"] = hyp.alignment
        if extras.return_tokens:
            entry["tokens"] = [runner.tokenizer.token(i) for i in hyp.tokens]
        hypotheses.append(entry)
    out: dict[str, Any] = {}
    if extras.several:
        out["text_outputs"] = [h.text for h in result.hypotheses]
    out["hypotheses"] = hypotheses
    if extras.return_alignment or extras.return_tokens:
        out["source_token_ids"] = list(result.source_ids)
    if extras.return_tokens:
        out["source_tokens"] = [runner.tokenizer.token(i) for i in result.source_ids]
    return out
