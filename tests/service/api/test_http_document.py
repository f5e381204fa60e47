"""Whole documents over HTTP (service/api/http/document.py, service/dataplane/documents.py): plain text,
HTML and Markdown come back with each sentence replaced by the runner's own translation of it and everything
around the sentences (spacing, paragraphs, markup) as it was; inline markup goes around words of the output;
a sentence over the source limit is cut and said to be; bad requests get 400 naming what was wrong."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from service.runtime.runner import Runner
from service.server import BackgroundServer
from tests.support.corpus import tiny_pairs
from tests.support.http import parse_sse, post_json
from tests.support.server import server_config

MAX_SOURCE_TOKENS = 24


@pytest.fixture(scope="module")
def http_server(tiny_bundle: Path, runner: Runner) -> Iterator[BackgroundServer]:
    """A server of the tiny bundle with HTTP, sources limited to MAX_SOURCE_TOKENS tokens."""
    config = server_config(tiny_bundle, http_port=0, max_source_tokens=MAX_SOURCE_TOKENS)
    with BackgroundServer(config, runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def clauses(runner: Runner) -> list[tuple[str, str]]:
    """One-clause sources of the tiny task (one sentence each) and the runner's translation of each."""
    sources = [s for s, _ in tiny_pairs(200, 7) if s.count(".") == 1][:6]
    assert len(sources) == 6
    return [(s, h[0].text) for s, h in zip(sources, runner.translate(sources), strict=True)]


def send(server: BackgroundServer, body: bytes, content_type: str, query: str = "", model: str = "translator"
         ) -> tuple[int, str, dict[str, str], str]:
    """POST a document: (status, content type, headers, body text)."""
    url = f"http://{server.http_address}/v2/models/{model}/document{query}"

    async def post() -> tuple[int, str, dict[str, str], str]:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.post(url, data=body, headers={"Content-Type": content_type}) as answer:
            return answer.status, answer.content_type, dict(answer.headers), await answer.text()

    return asyncio.run(post())


def test_plain_text_keeps_every_space_and_paragraph(http_server, clauses):
    (s1, t1), (s2, t2), (s3, t3), (s4, t4) = clauses[:4]
    doc = f"  {s1}\n\n{s2}  \n \n\t{s3}\r\n\r\n{s4}\n"
    status, kind, headers, text = send(http_server, doc.encode(), "text/plain; charset=utf-8")
    assert (status, kind) == (200, "text/plain"), text
    assert text == f"  {t1}\n\n{t2}  \n \n\t{t3}\r\n\r\n{t4}\n"
    assert headers["X-Document-Segments"] == "4" and "X-Document-Split" not in headers
    assert headers["X-Model-Name"] == "translator"


def test_html_blocks_bound_sentences_and_markup_stays(http_server, clauses):
    (s1, t1), (s2, t2), (s3, t3) = clauses[:3]
    doc = (f'<h1 class="x">{s1}</h1>\n<ul><li><b>{s2}</b></li></ul>\n<p translate="no">{s3}</p>'
           f"<script>var a = '{s3}';</script>")
    status, kind, _, text = send(http_server, doc.encode(), "text/html")
    assert (status, kind) == (200, "text/html"), text
    assert text == (f'<h1 class="x">{t1}</h1>\n<ul><li><b>{t2}</b></li></ul>\n<p translate="no">{s3}</p>'
                    f"<script>var a = '{s3}';</script>")


def test_an_inline_tag_goes_around_words_of_the_output(http_server, clauses):
    source, target = clauses[0]
    first, rest = source.split(" ", 1)
    status, _, _, text = send(http_server, f"<p><i>{first}</i> {rest}</p>".encode(), "text/html")
    assert status == 200, text
    assert text.count("<i>") == 1 and text.count("</i>") == 1 and text.index("<i>") < text.index("</i>")
    inner = text[text.index("<i>") + 3:text.index("</i>")]
    assert inner.strip() and inner in target
    assert re.sub(r"</?(p|i)>", "", text) == target


def test_markdown_keeps_its_syntax(http_server, clauses):
    (s1, t1), (s2, t2), (s3, t3), (s4, t4) = clauses[:4]
    doc = f"# {s1}\n\n- {s2}\n- {s3}\n\n> {s4}\n\n```\n{s1}\n```\n"
    status, kind, _, text = send(http_server, doc.encode(), "text/markdown")
    assert (status, kind) == (200, "text/markdown"), text
    assert text == f"# {t1}\n\n- {t2}\n- {t3}\n\n> {t4}\n\n```\n{s1}\n```\n"


def test_a_sentence_over_the_source_limit_is_cut_and_said_to_be(http_server, runner, clauses):
    words = " ".join(s.rstrip(".") for s, _ in clauses) + "."
    assert len(runner.tokenizer.encode([words])[0]) > MAX_SOURCE_TOKENS
    status, _, headers, text = send(http_server, words.encode(), "text/plain")
    assert status == 200, text
    assert headers["X-Document-Split"] == "0" and headers["X-Document-Segments"] == "1"
    assert text.strip()
    status, _, body = post_json(f"http://{http_server.http_address}/v2/models/translator/generate",
                                {"text_input": words})
    assert status == 400 and b"tokens long" in body  # one text stays one sequence


@pytest.mark.parametrize(("content_type", "query", "says"), [
    ("application/json", "", "Content-Type is one of"),
    ("text/plain", "?format=docx", "unknown document format 'docx'"),
    ("text/plain", "?n_best=2", "n_best is refused for documents"),
    ("text/plain", "?return_alternatives=true", "return_alternatives is refused for documents"),
    ("text/plain", "?beam_sise=2", "beam_sise"),
    ("text/plain", "?protect=%5B", "protect"),
])
def test_bad_requests_are_400_and_say_why(http_server, clauses, content_type, query, says):
    status, _, _, text = send(http_server, clauses[0][0].encode(), content_type, query)
    assert status == 400 and says in text, text


def test_a_document_that_is_not_utf8_or_of_an_unknown_model_is_refused(http_server):
    status, _, _, text = send(http_server, b"caf\xe9.", "text/plain")
    assert status == 400 and "not UTF-8" in text
    status, _, _, text = send(http_server, b"hello.", "text/plain", model="nope")
    assert status == 404 and "nope" in text


def test_generate_with_a_format_translates_a_document(http_server, clauses):
    (s1, t1), (s2, t2) = clauses[:2]
    url = f"http://{http_server.http_address}/v2/models/translator/generate"
    status, _, body = post_json(url, {"text_input": f"<p>{s1}</p>\n\n<p>{s2}</p>",
                                      "parameters": {"format": "html"}})
    assert status == 200, body
    answer = json.loads(body)
    assert answer["text_output"] == f"<p>{t1}</p>\n\n<p>{t2}</p>"
    assert (answer["segments"], answer["split"]) == (2, [])
    for parameters, says in [({"format": "html", "n_best": 2}, "n_best is refused for documents"),
                             ({"format": 3}, "parameter format must be a string"),
                             ({"format": "text", "protect": 5}, "parameter protect must be a regular")]:
        status, _, body = post_json(url, {"text_input": s1, "parameters": parameters})
        assert status == 400 and says in body.decode(), body


def test_generate_stream_with_a_format_sends_the_document_in_parts_as_each_is_final(http_server, clauses):
    sources, targets = zip(*clauses[:5], strict=True)
    doc = "\n\n".join(f"<p>{s}</p>" for s in sources) + "\n<!-- end -->"
    url = f"http://{http_server.http_address}/v2/models/translator/generate_stream"
    status, kind, body = post_json(url, {"text_input": doc, "parameters": {"format": "html"}})
    assert (status, kind) == (200, "text/event-stream"), body
    events = parse_sse(body)
    assert "".join(e["text_output"] for e in events) == "\n\n".join(f"<p>{t}</p>" for t in targets) + \
        "\n<!-- end -->"
    assert [e["done"] for e in events] == [1, 2, 3, 4, 5, 5]  # the last part: the literal tail
    assert {e["segments"] for e in events} == {5} and {e["model_name"] for e in events} == {"translator"}
    status, _, body = post_json(url, {"text_input": doc, "parameters": {"format": "pdf"}})
    assert status == 400 and b"unknown document format 'pdf'" in body


def test_kserve_infer_with_a_format_translates_each_text_as_a_document(http_server, clauses):
    (s1, t1), (s2, t2), (s3, t3) = clauses[:3]
    url = f"http://{http_server.http_address}/v2/models/translator/infer"
    docs = [f"# {s1}\n\n{s2}\n", f"- {s3}\n"]
    request = {"inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": docs}],
               "parameters": {"format": "markdown"}}
    status, _, body = post_json(url, request)
    assert status == 200, body
    (output,) = json.loads(body)["outputs"]
    assert output["data"] == [f"# {t1}\n\n{t2}\n", f"- {t3}\n"]
    request["parameters"] = {"format": "markdown", "stream": True}
    status, _, body = post_json(url, request)
    assert status == 400 and b"a document comes back whole" in body
