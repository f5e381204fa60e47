"""What one soak request is: its RPC or HTTP route (the server's metric label), what to send (with which
headers), its deadline, the statuses that are correct for it, and the references of its valid texts or
scored pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

TRANSLATE = "translator.v1.Translator/Translate"
STREAM = "translator.v1.Translator/TranslateStream"
INFER = "inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "inference.GRPCInferenceService/ModelStreamInfer"
HEALTH = "grpc.health.v1.Health/Check"
SCORE = "translator.v1.Translator/Score"
REPOSITORY_INDEX = "inference.GRPCInferenceService/RepositoryIndex"
REPOSITORY_LOAD = "inference.GRPCInferenceService/RepositoryModelLoad"
REPOSITORY_UNLOAD = "inference.GRPCInferenceService/RepositoryModelUnload"
# HTTP routes, as the server's metric label names them (their path patterns)
HTTP_INFER = "/v2/models/{model}/infer"
HTTP_GENERATE = "/v2/models/{model}/generate"
HTTP_GENERATE_STREAM = "/v2/models/{model}/generate_stream"
HTTP_SCORE = "/v2/models/{model}/score"
HTTP_REPOSITORY_INDEX = "/v2/repository/index"
HTTP_REPOSITORY_LOAD = "/v2/repository/models/{model}/load"
HTTP_REPOSITORY_UNLOAD = "/v2/repository/models/{model}/unload"
HTTP_METHODS = frozenset({HTTP_INFER, HTTP_GENERATE, HTTP_GENERATE_STREAM, HTTP_SCORE, HTTP_REPOSITORY_INDEX,
                          HTTP_REPOSITORY_LOAD, HTTP_REPOSITORY_UNLOAD})

VALID_DEADLINE_S = 60.0  # generous: a valid request answered later than this counts as hanging
LOG_PROB_TOLERANCE = (1e-4, 1e-3)  # (relative, absolute): a pair scored in a batch against scored alone


@dataclass
class Reference:
    """What decoding a text alone gives: the best hypothesis' tokens and text."""

    tokens: list[int]
    text: str


@dataclass
class ScoreReference:
    """What scoring a (source, target) pair alone gives: the tokens scored, their log-prob's sum, and
    whether the end token was among them."""

    token_ids: list[int]
    log_prob: float
    end_token_scored: bool


@dataclass
class Case:
    """One request of the soak: its RPC, message(s), deadline and what may come back."""

    kind: str
    method: str  # the server's metric label of the RPC (an HTTP route's path pattern for HTTP)
    request: Any  # the request message; for v2_stream, a list of them; for HTTP, an HttpRequest
    deadline_s: float
    allowed: frozenset[str]  # terminal status codes that are correct for this case
    hint: str = ""  # a fragment the status message must contain when the code is not OK
    references: list[Reference] = field(default_factory=list)  # valid cases: one per text
    cancel_after: int = 0  # cancel_stream: pieces to read before cancelling
    metadata: tuple[tuple[str, str], ...] = ()  # gRPC metadata sent with the call (a restriction's header)
    scores: list[ScoreReference] = field(default_factory=list)  # valid score cases: one per pair
    loads: bool = False  # a repository load: its warm-up runs the model (an injected fault may fail it)


def score_problems(got: list[tuple[list[int], float, bool]], refs: list[ScoreReference]) -> list[str]:
    """Problems of scored pairs ((token ids, log_prob, end_token_scored) each) against scoring each alone."""
    if len(got) != len(refs):
        return [f"{len(got)} score results for {len(refs)} pairs"]
    problems = []
    for i, ((ids, log_prob, ended), ref) in enumerate(zip(got, refs, strict=True)):
        relative, absolute = LOG_PROB_TOLERANCE
        if ids != ref.token_ids or ended != ref.end_token_scored:
            problems.append(f"pair {i}: scored tokens {ids[:8]}... (end {ended}) differ from scoring alone "
                            f"{ref.token_ids[:8]}... (end {ref.end_token_scored})")
        elif not math.isclose(log_prob, ref.log_prob, rel_tol=relative, abs_tol=absolute):
            problems.append(f"pair {i}: log_prob {log_prob} differs from scoring alone {ref.log_prob}")
    return problems
