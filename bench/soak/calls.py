"""Send one soak case over grpc.aio (or HTTP: bench/soak/http_calls.py) and check its answer: one
terminal answer, the right status, a clean message, the reference result, and no answer later than
its deadline."""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict

from grpc import aio

from bench.common.loadgen import Record
from bench.soak.case import (
    HTTP_METHODS,
    INFER,
    REPOSITORY_INDEX,
    REPOSITORY_LOAD,
    REPOSITORY_UNLOAD,
    SCORE,
    STREAM,
    STREAM_INFER,
    TRANSLATE,
    Case,
    score_problems,
)
from bench.soak.http_calls import HttpClient, send_http
from protos.inference import grpc_service_pb2_grpc as v2_grpc
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.dataplane import kserve
from tests.support.clean_messages import internals_in

LATE_SLACK_S = 3.0  # an answer this long after the client's deadline counts as hanging
RETIRED = "retired:"  # a problem's mark: failed as its model version was retired (report.excuse_retired)


class Stubs:
    """The stubs of one grpc.aio channel, and the HTTP client (None: gRPC only)."""

    def __init__(self, channel: aio.Channel, http: HttpClient | None = None) -> None:
        self.translator = pb_grpc.TranslatorStub(channel)
        self.v2 = v2_grpc.GRPCInferenceServiceStub(channel)
        self.http = http


def _tokens_problem(what: str, got: list[int], want: list[int]) -> list[str]:
    """A problem unless the token ids are identical."""
    return [] if got == want else [f"{what}: tokens {got[:12]}... differ from decoding alone {want[:12]}..."]


async def _translate(case: Case, stubs: Stubs, record: Record, injected: bool) -> None:
    """Unary Translate."""
    response = await stubs.translator.Translate(case.request, timeout=case.deadline_s)
    record.code, record.answers = "OK", 1
    if len(response.results) != len(case.references):
        record.problems.append(f"{len(response.results)} results for {len(case.references)} texts")
    for i, (result, ref) in enumerate(zip(response.results, case.references, strict=False)):
        record.problems += _tokens_problem(f"text {i}", list(result.hypotheses[0].token_ids), ref.tokens)


async def _stream(case: Case, stubs: Stubs, record: Record, injected: bool) -> None:
    """TranslateStream: pieces then exactly one result; cancelled after `cancel_after` pieces if asked."""
    call = stubs.translator.TranslateStream(case.request, timeout=case.deadline_s)
    pieces, results = [], []
    async for message in call:
        if results:
            record.problems.append("a message after the final result")
        if message.HasField("piece"):
            pieces.append(message.piece)
            if case.cancel_after and len(pieces) >= case.cancel_after:
                call.cancel()
                break
        else:
            results.append(message.result)
    record.code = (await call.code()).name
    record.details = await call.details() or ""
    record.answers = len(results) + (record.code != "OK")
    if record.code == "OK" and results:
        hyp = results[0].hypotheses[0]
        record.problems += _tokens_problem("stream", list(hyp.token_ids), case.references[0].tokens)
        record.problems += _tokens_problem("pieces", [p.token_id for p in pieces], case.references[0].tokens)
        if "".join(p.text for p in pieces) != hyp.text:
            record.problems.append("the pieces do not add up to the final text")
    elif record.code == "OK":
        record.problems.append("the stream ended OK without a result")


def _output_texts(response) -> list[str]:
    """The TRANSLATION texts of a ModelInferResponse (empty when it has no output)."""
    names = [o.name for o in response.outputs]
    if kserve.OUTPUT not in names:
        return []
    index = names.index(kserve.OUTPUT)
    count = int(response.outputs[index].shape[0])
    raw = kserve.deserialize_bytes(response.raw_output_contents[index], count)
    return [b.decode("utf-8") for b in raw]


async def _infer(case: Case, stubs: Stubs, record: Record, injected: bool) -> None:
    """KServe v2 ModelInfer."""
    response = await stubs.v2.ModelInfer(case.request, timeout=case.deadline_s)
    record.code, record.answers = "OK", 1
    if _output_texts(response) != [r.text for r in case.references]:
        record.problems.append("ModelInfer texts differ from decoding alone")


async def _stream_infer(case: Case, stubs: Stubs, record: Record, injected: bool) -> None:
    """ModelStreamInfer of several requests: each id gets exactly one final response or one error."""
    call = stubs.v2.ModelStreamInfer(iter(case.request), timeout=case.deadline_s)
    finals: dict[str, int] = defaultdict(int)
    pieces: dict[str, list[str]] = defaultdict(list)
    texts: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    async for message in call:
        rid = message.infer_response.id
        if finals[rid]:
            record.problems.append(f"request {rid}: a response after its final one")
        if message.error_message:
            finals[rid] += 1
            errors[rid] = message.error_message
        elif message.infer_response.parameters["triton_final_response"].bool_param:
            finals[rid] += 1
            texts[rid] = _output_texts(message.infer_response)
        else:
            pieces[rid] += _output_texts(message.infer_response)
    record.code = (await call.code()).name
    record.answers = 1
    ids = [r.id for r in case.request]
    if record.code == "OK" and [finals[i] for i in ids] != [1] * len(ids):
        record.problems.append(f"final answers per request {dict(finals)}, expected one each")
    for rid, ref in zip(ids[:2], case.references, strict=True):
        if rid in errors:
            if retired_text(errors[rid]):  # its version was retired: the report judges it
                record.problems.append(f"{RETIRED} {errors[rid]!r}")
            elif "queue is full" not in errors[rid] and not (injected and "error id" in errors[rid]):
                record.problems.append(f"request {rid} failed: {errors[rid]}")
        elif texts.get(rid) != [ref.text]:
            record.problems.append(f"request {rid}: {texts.get(rid)} differs from decoding alone")
    if ids[0] not in errors and "".join(pieces[ids[0]]) != case.references[0].text:
        record.problems.append("streamed pieces do not add up to the text")
    if case.hint not in errors.get(ids[-1], ""):
        record.problems.append(f"request {ids[-1]}: expected an error containing {case.hint!r}")
    record.details = "; ".join(errors.values())


async def _score(case: Case, stubs: Stubs, record: Record, injected: bool) -> None:
    """translator.v1 Score."""
    response = await stubs.translator.Score(case.request, timeout=case.deadline_s)
    record.code, record.answers = "OK", 1
    got = [(list(r.token_ids), r.log_prob, r.end_token_scored) for r in response.results]
    record.problems += score_problems(got, case.scores)


async def _repository(case: Case, stubs: Stubs, record: Record, injected: bool) -> None:
    """A call of Triton's repository API, with the case's metadata (the restriction's header)."""
    method = getattr(stubs.v2, case.method.rsplit("/", 1)[1])
    await method(case.request, metadata=case.metadata, timeout=case.deadline_s)
    record.code, record.answers = "OK", 1


SENDERS = {TRANSLATE: _translate, STREAM: _stream, INFER: _infer, STREAM_INFER: _stream_infer, SCORE: _score,
           REPOSITORY_INDEX: _repository, REPOSITORY_LOAD: _repository, REPOSITORY_UNLOAD: _repository}


async def send(index: int, case: Case, stubs: Stubs, injected_faults: bool = False) -> Record:
    """Send a case, wait for its terminal answer (bounded by its deadline) and check it."""
    record = Record(index, start=time.perf_counter(), kind=case.kind, method=case.method)
    try:
        if case.method in HTTP_METHODS:
            assert stubs.http is not None, "an HTTP case needs the server's HTTP port"
            await send_http(case, stubs.http, record)
        else:
            await SENDERS[case.method](case, stubs, record, injected_faults)
    except aio.AioRpcError as exc:
        record.code, record.details, record.answers = exc.code().name, exc.details() or "", record.answers + 1
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed answer is a finding, not a crash of the driver
        record.problems.append(f"the driver could not read the answer: {type(exc).__name__}: {exc}")
    record.end = time.perf_counter()
    record.latency = record.waited_s if record.code == "OK" else math.nan
    check(case, record, injected_faults)
    return record


def retired_text(message: str) -> bool:
    """Whether an error says its model version stopped serving (a reload or unload retired it, or the
    server shut down) before the request was done."""
    return "stopped serving" in message or "shut down" in message


def check(case: Case, record: Record, injected_faults: bool) -> None:
    """Status, message and timing checks common to every case. A request the model's retirement failed
    (UNAVAILABLE "... shut down ...") is marked RETIRED, for the report to judge against the reloads."""
    retired = bool(case.references or case.scores) and record.code == "UNAVAILABLE" and retired_text(
        record.details)
    if retired:
        record.problems.append(f"{RETIRED} {record.details!r}")
    allowed = set(case.allowed) | ({"UNAVAILABLE"} if retired else set())
    if case.references or case.scores:  # an accepted request may meet a full queue or a failed batch
        allowed |= {"RESOURCE_EXHAUSTED"} | ({"INTERNAL"} if injected_faults else set())
    if case.loads and injected_faults:  # a load's warm-up translation may meet an injected failure
        allowed |= {"INTERNAL"}
    if record.answers != 1:
        record.problems.append(f"{record.answers} terminal answers")
    if record.code not in allowed:
        record.problems.append(f"status {record.code} ({record.details!r}) not in {sorted(allowed)}")
    elif record.code not in ("OK", "CANCELLED") and case.method != STREAM_INFER and not retired:
        hint = {"RESOURCE_EXHAUSTED": "queue is full" if case.references or case.scores else case.hint,
                "INTERNAL": "error id"}.get(record.code, case.hint)
        if hint.lower() not in record.details.lower():
            record.problems.append(f"{record.code} message {record.details!r} lacks {hint!r}")
    if internals_in(record.details):
        record.problems.append(f"status message shows internals: {record.details[:200]!r}")
    if record.waited_s > case.deadline_s + LATE_SLACK_S:
        record.problems.append(f"answered {record.waited_s:.1f} s after a {case.deadline_s:.1f} s deadline")
