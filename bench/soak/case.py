"""What one soak request is: its RPC or HTTP route (the server's metric label), what to send, its
deadline, the statuses that are correct for it, and the references of its valid texts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TRANSLATE = "translator.v1.Translator/Translate"
STREAM = "translator.v1.Translator/TranslateStream"
INFER = "inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "inference.GRPCInferenceService/ModelStreamInfer"
HEALTH = "grpc.health.v1.Health/Check"
# HTTP routes, as the server's metric label names them (their path patterns)
HTTP_INFER = "/v2/models/{model}/infer"
HTTP_GENERATE = "/v2/models/{model}/generate"
HTTP_GENERATE_STREAM = "/v2/models/{model}/generate_stream"
HTTP_METHODS = frozenset({HTTP_INFER, HTTP_GENERATE, HTTP_GENERATE_STREAM})

VALID_DEADLINE_S = 60.0  # generous: a valid request answered later than this counts as hanging


@dataclass
class Reference:
    """What decoding a text alone gives: the best hypothesis' tokens and text."""

    tokens: list[int]
    text: str


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
