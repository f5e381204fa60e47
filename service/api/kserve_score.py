"""KServe v2 form of Score: a ModelInferRequest with a BYTES input TARGET beside TEXT (both shape [N]) scores
each target given its source instead of translating it.

Outputs (FP32 unless said): LOG_PROB [N] (each target's total log-prob, its end token included when
scored), SCORE [N] (the mean per scored token), TOKEN_LOG_PROBS [N, T] (each scored token's log-prob, T
the most tokens a row scored; a shorter row is padded with 0), TOKEN_COUNT INT32 [N] (the tokens each row
scored) and END_TOKEN_SCORED BOOL [N] (whether eos was appended and scored: false for a target as long
as a translation cut at the maximum length; one byte per element in raw form, as Triton's BOOL). Request
parameters: source_language / target_language (many-to-many models); the decoding parameters of a
translation do not apply and are refused. The semantics are translator.v1 Score's (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from google.protobuf.message import Message

from service.api.kserve_codec import INPUT_NAME, check_input_names, decode_texts, shown
from service.api.kserve_parameters import LANGUAGE_KEYS
from service.domain.errors import InvalidTensor
from service.domain.types import ScoreOptions, ScoreResult

TARGET_NAME = "TARGET"
OUTPUTS = {"LOG_PROB": "FP32", "SCORE": "FP32", "TOKEN_LOG_PROBS": "FP32", "TOKEN_COUNT": "INT32",
           "END_TOKEN_SCORED": "BOOL"}
ALLOWED_KEYS = (*LANGUAGE_KEYS, "triton_enable_empty_final_response")


def is_score(request: Message) -> bool:
    """Whether the request asks for scoring (it has a TARGET input)."""
    return any(tensor.name == TARGET_NAME for tensor in request.inputs)


def decode_score_request(request: Message) -> tuple[list[str], list[str], ScoreOptions]:
    """Sources, targets and options of a score request; InvalidTensor saying what is wrong."""
    check_input_names(request, [INPUT_NAME, TARGET_NAME])
    sources, targets = decode_texts(request, 0), decode_texts(request, 1)
    if len(sources) != len(targets):
        raise InvalidTensor(f"input {TARGET_NAME} holds {len(targets)} texts for {len(sources)} in "
                            f"{INPUT_NAME}: send one target per source")
    for output in request.outputs:
        if output.name not in OUTPUTS:
            raise InvalidTensor(f"unknown output {shown(output.name)}: scoring gives {', '.join(OUTPUTS)}")
    languages = {}
    for key, value in request.parameters.items():
        if key not in ALLOWED_KEYS:
            raise InvalidTensor(f"parameter {shown(key)} does not apply to scoring (a {TARGET_NAME} "
                                f"input); it takes {', '.join(LANGUAGE_KEYS)}")
        if key in LANGUAGE_KEYS:
            if value.WhichOneof("parameter_choice") != "string_param":
                raise InvalidTensor(f"parameter {key} must be a string (string_param)")
            languages[key] = value.string_param or None
    return sources, targets, ScoreOptions(**languages)


def encode_score_outputs(response: Message, results: Sequence[ScoreResult], names: set[str]) -> None:
    """Append the score outputs of these names to a ModelInferResponse, as raw little-endian contents."""
    longest = max(len(r.log_probs) for r in results)
    token_log_probs = np.zeros((len(results), longest), np.float32)
    for i, r in enumerate(results):
        token_log_probs[i, : len(r.log_probs)] = r.log_probs
    values = {
        "LOG_PROB": np.array([r.log_prob for r in results], np.float32),
        "SCORE": np.array([r.score for r in results], np.float32),
        "TOKEN_LOG_PROBS": token_log_probs,
        "TOKEN_COUNT": np.array([len(r.log_probs) for r in results], np.int32),
        "END_TOKEN_SCORED": np.array([r.end_token_scored for r in results], np.bool_),
    }
    for name, array in values.items():
        if name not in names:
            continue
        tensor = response.outputs.add(name=name, datatype=OUTPUTS[name])
        tensor.shape.extend(array.shape)
        response.raw_output_contents.append(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def wanted(request: Message) -> set[str]:
    """The outputs a score request names (all when it names none)."""
    return {o.name for o in request.outputs} or set(OUTPUTS)
