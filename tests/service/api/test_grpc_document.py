"""Whole documents over translator.v1 (TranslateDocument, TranslateDocumentStream; the servicer of
service/api/grpc/translator.py): the unary answer is the HTTP document route's, each sentence the runner's
own translation in its place; the stream's start counts the segments, its parts come in document order, one
segment more each, and spell the unary answer; a sentence over the source limit is cut and said to be; bad
requests are INVALID_ARGUMENT naming the problem, an unknown model NOT_FOUND."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.corpus import tiny_pairs
from tests.support.server import server_config

MAX_SOURCE_TOKENS = 24
MAX_DOCUMENT_BYTES = 2000
TEXT, HTML, MARKDOWN = pb.DOCUMENT_FORMAT_TEXT, pb.DOCUMENT_FORMAT_HTML, pb.DOCUMENT_FORMAT_MARKDOWN
MEDIA = {TEXT: "text/plain", HTML: "text/html", MARKDOWN: "text/markdown"}


@pytest.fixture(scope="module")
def doc_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with HTTP, sources limited to MAX_SOURCE_TOKENS tokens and documents to
    MAX_DOCUMENT_BYTES bytes."""
    config = server_config(tiny_bundle, http_port=0, max_source_tokens=MAX_SOURCE_TOKENS,
                           max_document_bytes=MAX_DOCUMENT_BYTES)
    with BackgroundServer(config, runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def stub(doc_server: BackgroundServer) -> Iterator[pb_grpc.TranslatorStub]:
    """A translator.v1 stub of `doc_server`."""
    with grpc.insecure_channel(doc_server.address) as channel:
        yield pb_grpc.TranslatorStub(channel)


@pytest.fixture(scope="module")
def clauses(runner: Runner) -> list[tuple[str, str]]:
    """One-clause sources of the tiny task (one sentence each) and the runner's translation of each."""
    sources = [s for s, _ in tiny_pairs(200, 7) if s.count(".") == 1][:6]
    assert len(sources) == 6
    return [(s, h[0].text) for s, h in zip(sources, runner.translate(sources), strict=True)]


def unary(stub: pb_grpc.TranslatorStub, document: str, fmt: int, **fields) -> pb.TranslateDocumentResponse:
    """TranslateDocument of `document`."""
    request = pb.TranslateDocumentRequest(document=document, format=fmt, **fields)
    return stub.TranslateDocument(request, timeout=60)


def streamed(stub: pb_grpc.TranslatorStub, document: str, fmt: int, **fields
             ) -> list[pb.TranslateDocumentStreamResponse]:
    """Every message of TranslateDocumentStream of `document`."""
    request = pb.TranslateDocumentRequest(document=document, format=fmt, **fields)
    return list(stub.TranslateDocumentStream(request, timeout=60))


def over_http(server: BackgroundServer, document: str, fmt: int) -> str:
    """The HTTP document route's answer for the same document."""
    request = urllib.request.Request(f"http://{server.http_address}/v2/models/translator/document",
                                     data=document.encode(), headers={"Content-Type": MEDIA[fmt]})
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.status == 200
        return answer.read().decode("utf-8")


def documents(clauses: list[tuple[str, str]]) -> list[tuple[str, int, str, int]]:
    """(document, format, its expected translation, segments): plain text with paragraphs and odd spacing,
    HTML with blocks, an inline-free list and a kept script, Markdown."""
    (s1, t1), (s2, t2), (s3, t3), (s4, t4) = clauses[:4]
    return [
        (f"  {s1}\n\n{s2}  \n \n\t{s3}\r\n\r\n{s4}\n", TEXT, f"  {t1}\n\n{t2}  \n \n\t{t3}\r\n\r\n{t4}\n", 4),
        (f'<h1 class="x">{s1}</h1>\n<ul><li><b>{s2}</b></li></ul>\n<p translate="no">{s3}</p>'
         f"<script>var a = '{s3}';</script>", HTML,
         f'<h1 class="x">{t1}</h1>\n<ul><li><b>{t2}</b></li></ul>\n<p translate="no">{s3}</p>'
         f"<script>var a = '{s3}';</script>", 2),
        (f"# {s1}\n\n- {s2}\n- {s3}\n\n> {s4}\n\n```\n{s1}\n```\n", MARKDOWN,
         f"# {t1}\n\n- {t2}\n- {t3}\n\n> {t4}\n\n```\n{s1}\n```\n", 4),
    ]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["text", "html", "markdown"])
def test_the_unary_answer_is_each_sentence_translated_in_place_as_over_http(doc_server, stub, clauses, which):
    document, fmt, expected, segments = documents(clauses)[which]
    answer = unary(stub, document, fmt, request_id="doc-1")
    assert answer.document == expected
    assert answer.document == over_http(doc_server, document, fmt)
    assert (answer.segments, list(answer.split_segments)) == (segments, [])
    assert (answer.request_id, answer.model, answer.model_version) == ("doc-1", "translator", "1")
    assert unary(stub, document, fmt).request_id  # one is made when the client sends none


def test_an_inline_tag_goes_around_words_of_the_output_as_over_http(doc_server, stub, clauses):
    source, target = clauses[0]
    first, rest = source.split(" ", 1)
    document = f"<p><i>{first}</i> {rest}</p>"
    answer = unary(stub, document, HTML).document
    assert answer == over_http(doc_server, document, HTML)
    assert answer.count("<i>") == 1 and answer.count("</i>") == 1
    assert answer.index("<i>") < answer.index("</i>")
    assert answer.replace("<p>", "").replace("</p>", "").replace("<i>", "").replace("</i>", "") == target


@pytest.mark.parametrize("which", [0, 1, 2], ids=["text", "html", "markdown"])
def test_the_stream_starts_with_the_count_then_parts_in_order_that_spell_the_answer(stub, clauses, which):
    document, fmt, expected, segments = documents(clauses)[which]
    messages = streamed(stub, document, fmt, request_id="doc-2")
    assert {m.request_id for m in messages} == {"doc-2"}
    first, parts = messages[0], messages[1:]
    assert first.WhichOneof("event") == "start" and all(m.WhichOneof("event") == "part" for m in parts)
    start = first.start
    assert (start.segments, start.model, start.model_version) == (segments, "translator", "1")
    done = [m.part.done for m in parts]
    assert done[:segments] == list(range(1, segments + 1))  # one more segment final each part
    assert done[segments:] in ([], [segments])  # then at most the literal tail
    assert "".join(m.part.text for m in parts) == expected == unary(stub, document, fmt).document
    assert not any(m.part.split for m in parts)
    texts = [m.part.text for m in parts]
    for k, (_, translation) in enumerate(clauses[:segments]):  # segment k ends part k: document order
        assert translation in texts[k]


def test_a_document_without_sentences_is_one_tail_part(stub):
    document = "\n\n  ...\n"
    messages = streamed(stub, document, TEXT)
    assert messages[0].start.segments == 0
    assert [(m.part.text, m.part.done) for m in messages[1:]] == [(document, 0)]
    assert unary(stub, document, TEXT).document == document


def test_a_sentence_over_the_source_limit_is_cut_and_said_to_be(stub, runner, clauses):
    (s1, t1) = clauses[0]
    words = " ".join(s.rstrip(".") for s, _ in clauses) + "."
    assert len(runner.tokenizer.encode([words])[0]) > MAX_SOURCE_TOKENS
    document = f"{s1}\n\n{words}\n"
    answer = unary(stub, document, TEXT)
    assert (answer.segments, list(answer.split_segments)) == (2, [1])
    assert answer.document.startswith(f"{t1}\n\n") and answer.document[len(t1) + 2:].strip()
    messages = streamed(stub, document, TEXT)
    assert [(m.part.done, m.part.split) for m in messages[1:]][:2] == [(1, False), (2, True)]
    assert "".join(m.part.text for m in messages[1:]) == answer.document


def refused(call) -> grpc.RpcError:
    """The error of a call that must fail."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


@pytest.mark.parametrize(("fields", "code", "says"), [
    ({"format": pb.DOCUMENT_FORMAT_UNSPECIFIED}, grpc.StatusCode.INVALID_ARGUMENT,
     "format must be one of DOCUMENT_FORMAT_TEXT, DOCUMENT_FORMAT_HTML, DOCUMENT_FORMAT_MARKDOWN, got "
     "DOCUMENT_FORMAT_UNSPECIFIED"),
    ({"format": 9}, grpc.StatusCode.INVALID_ARGUMENT, "format must be one of"),
    ({"options": pb.TranslateOptions(beam_size=2, n_best=2)}, grpc.StatusCode.INVALID_ARGUMENT,
     "n_best and return_alternatives are refused for documents"),
    ({"options": pb.TranslateOptions(return_alternatives=True)}, grpc.StatusCode.INVALID_ARGUMENT,
     "refused for documents"),
    ({"protect": ["["]}, grpc.StatusCode.INVALID_ARGUMENT, "protect"),
    ({"options": pb.TranslateOptions(beam_size=99)}, grpc.StatusCode.INVALID_ARGUMENT, "beam_size"),
    ({"document": "we 7 big. " * 250}, grpc.StatusCode.INVALID_ARGUMENT,
     f"the document is 2500 bytes; this server translates documents of at most {MAX_DOCUMENT_BYTES} bytes"),
    ({"model": "nope"}, grpc.StatusCode.NOT_FOUND, "nope"),
])
@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
def test_bad_requests_are_refused_naming_the_problem(stub, clauses, fields, code, says, streaming):
    fields = {"document": clauses[0][0], "format": TEXT} | fields
    request = pb.TranslateDocumentRequest(**fields)
    if streaming:
        error = refused(lambda: list(stub.TranslateDocumentStream(request, timeout=60)))
    else:
        error = refused(lambda: stub.TranslateDocument(request, timeout=60))
    assert error.code() == code and says in error.details(), error.details()


def test_protected_patterns_are_kept_in_place(stub, clauses):
    source, _ = clauses[0]
    document = f"SKU-4411 {source}"
    answer = unary(stub, document, TEXT, protect=[r"SKU-\d+"]).document
    assert answer.count("SKU-4411") == 1  # kept whole, never read by the model


def test_the_http_route_refuses_the_same_oversized_document(doc_server):
    with pytest.raises(urllib.error.HTTPError) as info:
        over_http(doc_server, "we 7 big. " * 250, TEXT)
    assert info.value.code == 400
