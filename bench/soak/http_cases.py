"""The soak's HTTP requests, beside its gRPC ones: KServe v2 REST infer (JSON tensors, and Triton's
binary tensor data built by tritonclient.http), generate, generate_stream (server-sent events), a
stream the client leaves after its first event, and hostile bodies (malformed JSON, a wrong shape,
an unknown model, a bad parameter, a body over the size limit).

`HttpCases` is a mixin of bench/soak/cases.py's Mix (its texts, references and random generator);
each case's request is an `HttpRequest`, sent by bench/soak/http_calls.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.http as triton_http

from bench.soak.case import HTTP_GENERATE, HTTP_GENERATE_STREAM, HTTP_INFER, VALID_DEADLINE_S, Case, Reference

MODEL = "/v2/models/translator"
HEADER_LENGTH = "Inference-Header-Content-Length"
# kind -> share of the mix (bench/soak/cases.py adds them to its own)
HTTP_MIX: dict[str, float] = {
    "http_infer": 0.05, "http_infer_binary": 0.05, "http_generate": 0.07, "http_generate_stream": 0.07,
    "http_cancel_stream": 0.03, "http_bad_json": 0.03, "http_unknown_model": 0.02,
    "http_bad_parameter": 0.02, "http_oversized": 0.01,
}
HTTP_VALID_KINDS = frozenset({"http_infer", "http_infer_binary", "http_generate", "http_generate_stream"})
BAD_BODIES = [  # (body, what the 400's message must say)
    (b'{"inputs": [', "not valid JSON"), (b"\xff\xfe{}", "not UTF-8"), (b'"just a string"', "JSON object"),
    (b'{"inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": ["a"]}]}', "shape"),
]


@dataclass(frozen=True)
class HttpRequest:
    """A POST: its path, body and headers."""

    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


def json_request(path: str, payload: Any) -> HttpRequest:
    """A POST of a JSON body."""
    return HttpRequest(path, json.dumps(payload).encode("utf-8"))


def infer_payload(texts: Sequence[str], parameters: dict[str, Any]) -> dict[str, Any]:
    """A KServe v2 REST infer body of TEXT = texts as JSON data."""
    tensor = {"name": "TEXT", "shape": [len(texts)], "datatype": "BYTES", "data": list(texts)}
    return {"inputs": [tensor], "parameters": parameters}


def binary_request(texts: Sequence[str], parameters: dict[str, Any]) -> HttpRequest:
    """An infer body with Triton's binary tensor data, input and output, as tritonclient.http builds it."""
    tensor = triton_http.InferInput("TEXT", [len(texts)], "BYTES")
    data = np.array([t.encode("utf-8") for t in texts], dtype=np.object_)
    tensor.set_data_from_numpy(data, binary_data=True)
    wanted = [triton_http.InferRequestedOutput("TRANSLATION", binary_data=True)]
    body, header_length = triton_http.InferenceServerClient.generate_request_body(
        [tensor], wanted, parameters=parameters or None)
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(header_length)}
    return HttpRequest(MODEL + "/infer", body, headers)


class HttpCases:
    """The HTTP cases of the mix (a mixin: the Mix provides rng, texts, long_texts, reference, ...)."""

    rng: Any
    texts: list[str]
    long_texts: list[str]
    max_beam: int
    max_message_bytes: int
    max_output_tokens: int | None
    max_len: int

    def reference(self, text: str, beam: int = 1, max_tokens: int | None = None) -> Reference:
        raise NotImplementedError  # the Mix's

    def _http_texts(self) -> tuple[list[str], int]:
        """1-3 texts and a beam size."""
        texts = [self.rng.choice(self.texts) for _ in range(self.rng.choice([1, 1, 2, 3]))]
        return texts, self.rng.choice([1, 1, 2])

    # ----- valid -------------------------------------------------------------------------
    def _http_infer(self) -> Case:
        texts, beam = self._http_texts()
        parameters = {"beam_size": beam} if beam > 1 else {}
        request = json_request(MODEL + "/infer", infer_payload(texts, parameters))
        return Case("http_infer", HTTP_INFER, request, VALID_DEADLINE_S, frozenset({"OK"}),
                    references=[self.reference(t, beam) for t in texts])

    def _http_infer_binary(self) -> Case:
        texts, beam = self._http_texts()
        request = binary_request(texts, {"beam_size": beam} if beam > 1 else {})
        return Case("http_infer_binary", HTTP_INFER, request, VALID_DEADLINE_S, frozenset({"OK"}),
                    references=[self.reference(t, beam) for t in texts])

    def _http_generate(self) -> Case:
        text, beam = self.rng.choice(self.texts), self.rng.choice([1, 1, 2])
        max_tokens = self.rng.choice([None, None, 8])
        parameters = {"beam_size": beam} | ({"max_tokens": max_tokens} if max_tokens else {})
        request = json_request(MODEL + "/generate", {"text_input": text, "parameters": parameters})
        return Case("http_generate", HTTP_GENERATE, request, VALID_DEADLINE_S, frozenset({"OK"}),
                    references=[self.reference(text, beam, max_tokens)])

    def _http_generate_stream(self) -> Case:
        text, max_tokens = self.rng.choice(self.texts), self.rng.choice([None, 16])
        body = {"text_input": text} | ({"max_tokens": max_tokens} if max_tokens else {})  # beside it: allowed
        request = json_request(MODEL + "/generate_stream", body)
        return Case("http_generate_stream", HTTP_GENERATE_STREAM, request, VALID_DEADLINE_S,
                    frozenset({"OK"}), references=[self.reference(text, 1, max_tokens)])

    # ----- faults --------------------------------------------------------------------------
    def _http_cancel_stream(self) -> Case:
        text = self.rng.choice(self.long_texts)
        request = json_request(MODEL + "/generate_stream", {"text_input": text})
        return Case("http_cancel_stream", HTTP_GENERATE_STREAM, request, VALID_DEADLINE_S,
                    frozenset({"CANCELLED", "OK"}), references=[self.reference(text)], cancel_after=1)

    def _http_bad_json(self) -> Case:
        body, hint = self.rng.choice(BAD_BODIES)
        return Case("http_bad_json", HTTP_INFER, HttpRequest(MODEL + "/infer", body), 30.0,
                    frozenset({"INVALID_ARGUMENT"}), hint)

    def _http_unknown_model(self) -> Case:
        name = self.rng.choice(["nope", "translator2"])
        path = f"/v2/models/{name}/" + self.rng.choice(["generate", "generate_stream"])
        method = HTTP_GENERATE if path.endswith("/generate") else HTTP_GENERATE_STREAM
        return Case("http_unknown_model", method, json_request(path, {"text_input": "we"}), 30.0,
                    frozenset({"NOT_FOUND"}), "unknown model")

    def _http_bad_parameter(self) -> Case:
        parameters = self.rng.choice([{"beam_size": 0}, {"beam_size": self.max_beam + 1},
                                      {"max_tokens": "ten"}, {"max_output_tokens": self.max_len + 5}])
        request = json_request(MODEL + "/generate", {"text_input": self.rng.choice(self.texts),
                                                     "parameters": parameters})
        return Case("http_bad_parameter", HTTP_GENERATE, request, 30.0, frozenset({"INVALID_ARGUMENT"}),
                    next(iter(parameters)))

    def _http_oversized(self) -> Case:
        payload = infer_payload(["a" * (self.max_message_bytes + 1024)], {})
        return Case("http_oversized", HTTP_INFER, json_request(MODEL + "/infer", payload), 30.0,
                    frozenset({"INVALID_ARGUMENT"}), "at most")
