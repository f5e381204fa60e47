"""The soak's request mix: valid requests with their in-process references, and hostile ones (HTTP's:
bench/soak/http_cases.py; Score and the restricted repository API: bench/soak/admin_cases.py).

`build_cases(...)` returns a deterministic list of `Case`s: what to send, over which RPC, with
which deadline, and what may come back. Valid cases carry the tokens (or texts) that
`service.runtime.runner.Runner` produces for each text decoded alone; `bench/soak/calls.py` sends a case
and checks its answer against them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from bench.soak.admin_cases import ADMIN_MIX, ADMIN_VALID_KINDS, AdminCases
from bench.soak.case import INFER, STREAM, STREAM_INFER, TRANSLATE, VALID_DEADLINE_S, Case, Reference
from bench.soak.http_cases import HTTP_MIX, HTTP_VALID_KINDS, HttpCases
from protos.inference import grpc_service_pb2 as v2
from protos.translator.v1 import translator_pb2 as pb
from service.dataplane import kserve
from service.domain.types import DecodeOptions
from service.runtime.runner import Runner

# kind -> share of the mix; every kind but the valid ones is a fault
MIX: dict[str, float] = {
    "translate": 0.26, "v2_infer": 0.10, "stream": 0.12, "v2_stream": 0.05, "cancel_stream": 0.06,
    "short_deadline": 0.06, "oversized": 0.02, "empty_text": 0.03, "overlong_text": 0.03,
    "v2_wrong_datatype": 0.03, "v2_wrong_shape": 0.03, "v2_truncated_bytes": 0.03, "v2_bad_utf8": 0.03,
    "unknown_model": 0.03, "beam_out_of_range": 0.04, "v2_beam_out_of_range": 0.02,
    "too_many_texts": 0.02, "bad_option": 0.02, "v2_bad_parameter": 0.02,
} | HTTP_MIX | ADMIN_MIX
VALID_KINDS = (frozenset({"translate", "v2_infer", "stream", "v2_stream", "burst"}) | HTTP_VALID_KINDS
               | ADMIN_VALID_KINDS)
RESTRICTION = ("soak-key", "soak-secret")  # the model-repository group's header (key, value) by default


class Mix(HttpCases, AdminCases):
    """Builds cases from a pool of texts and the runner that provides the references; `restriction` is
    the server's model-repository key and value."""

    def __init__(self, runner: Runner, sources: Sequence[str], max_batch: int, max_message_bytes: int,
                 seed: int = 0, pool: int = 64, max_output_tokens: int | None = None,
                 restriction: tuple[str, str] = RESTRICTION) -> None:
        self.runner, self.rng, self.restriction = runner, random.Random(seed), restriction
        self.max_output_tokens = max_output_tokens  # the server's --max-output-tokens (None: the model's)
        self.max_len, self.max_beam, self.max_batch = runner.max_len, runner.max_beam, max_batch
        self.max_message_bytes = max_message_bytes
        self.texts = texts_of_every_length(runner, sources, pool, self.rng)
        self._refs: dict[tuple[str, int, int | None], Reference] = {}
        self.long_texts = sorted(self.texts, key=lambda t: -source_length(runner, t))[:8]

    def reference(self, text: str, beam: int = 1, max_tokens: int | None = None) -> Reference:
        """The best hypothesis of `text` decoded alone (cached)."""
        key = (text, beam, max_tokens)
        if key not in self._refs:
            options = DecodeOptions(beam_size=beam, max_output_tokens=max_tokens or self.max_output_tokens)
            hyp = self.runner.translate([text], options)[0][0]
            self._refs[key] = Reference(list(hyp.tokens), hyp.text)
        return self._refs[key]

    def _options(self) -> tuple[int, int | None]:
        """A beam size and max output tokens (None: the server's default) for a valid request."""
        beam = self.rng.choice([1, 1, 1, 2, min(4, self.max_beam)])
        return beam, self.rng.choice([None, None, 8, min(32, self.max_output_tokens or self.max_len - 1)])

    def case(self, kind: str) -> Case:
        """A new case of `kind`."""
        return getattr(self, f"_{kind}")()

    def cases(self, n: int, mix: dict[str, float] = MIX) -> list[Case]:
        """n cases drawn from the mix (every kind at least once when n allows)."""
        kinds = list(mix)
        drawn = kinds[:n] + self.rng.choices(kinds, weights=[mix[k] for k in kinds], k=max(0, n - len(kinds)))
        self.rng.shuffle(drawn)
        return [self.case(k) for k in drawn]

    # ----- valid -------------------------------------------------------------------------
    def _translate(self, texts: int | None = None) -> Case:
        n = texts or self.rng.choice([1, 1, 1, 2, 3, min(4, self.max_batch)])
        chosen = [self.rng.choice(self.texts) for _ in range(n)]
        beam, max_tokens = self._options()
        options = pb.TranslateOptions(beam_size=beam, max_output_tokens=max_tokens or 0)
        refs = [self.reference(t, beam, max_tokens) for t in chosen]
        request = pb.TranslateRequest(texts=chosen, options=options)
        return Case("translate", TRANSLATE, request, VALID_DEADLINE_S, frozenset({"OK"}), references=refs)

    def burst_case(self) -> Case:
        """A request of max_batch texts, sent in a burst beyond the queue (queue full is correct)."""
        case = self._translate(self.max_batch)
        case.kind, case.allowed, case.hint = "burst", frozenset({"OK", "RESOURCE_EXHAUSTED"}), "queue is full"
        return case

    def _v2_request(self, texts: Sequence[str], typed: bool) -> v2.ModelInferRequest:
        """A ModelInferRequest of TEXT = texts, raw or typed contents."""
        request = v2.ModelInferRequest(model_name="translator")
        tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
        data = [t.encode("utf-8") for t in texts]
        if typed:
            tensor.contents.bytes_contents.extend(data)
        else:
            request.raw_input_contents.append(kserve.serialize_bytes(data))
        return request

    def _v2_infer(self) -> Case:
        chosen = [self.rng.choice(self.texts) for _ in range(self.rng.choice([1, 1, 2, 3]))]
        request = self._v2_request(chosen, typed=self.rng.random() < 0.5)
        beam = self.rng.choice([1, 1, 2])
        if beam > 1:
            request.parameters["beam_size"].int64_param = beam
        refs = [self.reference(t, beam) for t in chosen]
        return Case("v2_infer", INFER, request, VALID_DEADLINE_S, frozenset({"OK"}), references=refs)

    def _stream(self) -> Case:
        text = self.rng.choice(self.texts)
        max_tokens = self.rng.choice([None, 16])
        options = pb.TranslateOptions(max_output_tokens=max_tokens or 0)
        request = pb.TranslateStreamRequest(text=text, options=options)
        return Case("stream", STREAM, request, VALID_DEADLINE_S, frozenset({"OK"}),
                    references=[self.reference(text, 1, max_tokens)])

    def _v2_stream(self) -> Case:
        """One ModelStreamInfer stream of three requests: streamed pieces, a plain one, an empty text."""
        a, b = self.rng.choice(self.texts), self.rng.choice(self.texts)
        streamed, plain = self._v2_request([a], typed=False), self._v2_request([b], typed=True)
        streamed.parameters["stream"].bool_param = True
        bad = self._v2_request([""], typed=False)
        for i, request in enumerate((streamed, plain, bad)):
            request.id = f"r{i}"
        return Case("v2_stream", STREAM_INFER, [streamed, plain, bad], VALID_DEADLINE_S, frozenset({"OK"}),
                    hint="is empty", references=[self.reference(a), self.reference(b)])

    # ----- faults --------------------------------------------------------------------------
    def _cancel_stream(self) -> Case:
        text = self.rng.choice(self.long_texts)
        request = pb.TranslateStreamRequest(text=text)
        return Case("cancel_stream", STREAM, request, VALID_DEADLINE_S, frozenset({"CANCELLED", "OK"}),
                    references=[self.reference(text)], cancel_after=1)

    def _short_deadline(self) -> Case:
        texts = [self.rng.choice(self.long_texts) for _ in range(min(4, self.max_batch))]
        options = pb.TranslateOptions(beam_size=min(4, self.max_beam))
        request = pb.TranslateRequest(texts=texts, options=options)
        refs = [self.reference(t, min(4, self.max_beam)) for t in texts]
        return Case("short_deadline", TRANSLATE, request, self.rng.uniform(0.02, 0.1),
                    frozenset({"DEADLINE_EXCEEDED", "OK"}), "deadline", references=refs)

    def _oversized(self) -> Case:
        request = pb.TranslateRequest(texts=["a" * (self.max_message_bytes + 1024)])
        return Case("oversized", TRANSLATE, request, 30.0, frozenset({"RESOURCE_EXHAUSTED"}),
                    "larger than max")

    def _invalid(self, kind: str, request: Any, hint: str, method: str = TRANSLATE,
                 code: str = "INVALID_ARGUMENT") -> Case:
        """A request the server must refuse with `code` and a message containing `hint`."""
        return Case(kind, method, request, 30.0, frozenset({code}), hint)

    def _empty_text(self) -> Case:
        text = self.rng.choice(["", " ", "\t\n", "   "])
        return self._invalid("empty_text", pb.TranslateRequest(texts=["ok", text][-self.rng.choice([1, 2]):]),
                             "is empty")

    def _overlong_text(self) -> Case:
        base = self.rng.choice(self.texts)
        target = self.rng.choice([self.max_len, 50 * self.max_len])  # just over, and far over
        text = base
        while source_length(self.runner, text) <= target:
            text = f"{text} {text}"
        return self._invalid("overlong_text", pb.TranslateRequest(texts=[text]), "long")

    def _v2_wrong_datatype(self) -> Case:
        request = self._v2_request([self.rng.choice(self.texts)], typed=False)
        request.inputs[0].datatype = self.rng.choice(["FP32", "INT64", "", "bytes"])
        return self._invalid("v2_wrong_datatype", request, "datatype", INFER)

    def _v2_wrong_shape(self) -> Case:
        request = self._v2_request([self.rng.choice(self.texts)], typed=self.rng.random() < 0.5)
        shape = self.rng.choice([[2], [1, 1], [-1], [0], []])
        del request.inputs[0].shape[:]
        request.inputs[0].shape.extend(shape)
        return self._invalid("v2_wrong_shape", request, "shape" if shape != [0] else "empty", INFER)

    def _v2_truncated_bytes(self) -> Case:
        request = self._v2_request([self.rng.choice(self.texts)], typed=False)
        raw = request.raw_input_contents[0]
        cut = self.rng.choice([2, len(raw) - 1, len(raw) // 2])
        request.raw_input_contents[0] = raw[: max(1, cut)]
        return self._invalid("v2_truncated_bytes", request, "truncated", INFER)

    def _v2_bad_utf8(self) -> Case:
        request = v2.ModelInferRequest(model_name="translator")
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
        bad = self.rng.choice([b"\xff\xfe", b"abc\xc3", b"\xed\xa0\x80x", self.rng.randbytes(12) + b"\xff"])
        request.raw_input_contents.append(kserve.serialize_bytes([bad]))
        return self._invalid("v2_bad_utf8", request, "UTF-8", INFER)

    def _unknown_model(self) -> Case:
        request = self._v2_request([self.rng.choice(self.texts)], typed=False)
        request.model_name = self.rng.choice(["nope", "translator2", "x" * 5000])
        if len(request.model_name) > 128:  # a name no repository can hold: refused before any lookup
            return self._invalid("unknown_model", request, "invalid model name", INFER, "INVALID_ARGUMENT")
        return self._invalid("unknown_model", request, "unknown model", INFER, "NOT_FOUND")

    def _beam_out_of_range(self) -> Case:
        beam = self.rng.choice([self.max_beam + 1, 99, 2**31 - 1])
        request = pb.TranslateRequest(texts=["x"], options=pb.TranslateOptions(beam_size=beam))
        return self._invalid("beam_out_of_range", request, "beam_size")

    def _v2_beam_out_of_range(self) -> Case:
        request = self._v2_request([self.rng.choice(self.texts)], typed=False)
        request.parameters["beam_size"].int64_param = self.rng.choice([0, -3, self.max_beam + 1])
        return self._invalid("v2_beam_out_of_range", request, "beam_size", INFER)

    def _too_many_texts(self) -> Case:
        request = pb.TranslateRequest(texts=["we"] * (self.max_batch + self.rng.choice([1, 100])))
        return self._invalid("too_many_texts", request, "at most")

    def _bad_option(self) -> Case:
        options = self.rng.choice([pb.TranslateOptions(beam_size=2, n_best=3),
                                   pb.TranslateOptions(max_output_tokens=self.max_len + 5),
                                   pb.TranslateOptions(length_penalty=float("nan"))])
        return self._invalid("bad_option", pb.TranslateRequest(texts=["we"], options=options), "must")

    def _v2_bad_parameter(self) -> Case:
        request = self._v2_request([self.rng.choice(self.texts)], typed=False)
        request.parameters["max_tokens"].string_param = self.rng.choice(["ten", "-1", "1e3", "x" * 3000])
        return self._invalid("v2_bad_parameter", request, "max_tokens", INFER)


def source_length(runner: Runner, text: str) -> int:
    """Source tokens of a text as the service counts them (tokenizer ids + the source suffix), unchecked."""
    return len(runner.tokenizer.encode([text])[0]) + len(runner.source_suffix)


def texts_of_every_length(runner: Runner, sources: Sequence[str], count: int,
                          rng: random.Random) -> list[str]:
    """`count` texts whose token lengths spread over 2 .. the model's limit: sources joined."""
    pool = [s for s in sources if source_length(runner, s) <= runner.max_len]
    if not pool:
        raise ValueError("no source sentence fits the model's max_len")
    out = []
    for i in range(count):
        target = 2 + (runner.max_len - 2) * i / max(1, count - 1)
        text = rng.choice(pool)
        while source_length(runner, text) < target:
            candidate = f"{text} {rng.choice(pool)}"
            if source_length(runner, candidate) > runner.max_len:
                break
            text = candidate
        out.append(text)
    words = sorted({w for s in pool for w in s.split()})
    out += rng.sample(words, min(len(words), max(1, count // 8)))  # single words: the shortest texts
    return out
