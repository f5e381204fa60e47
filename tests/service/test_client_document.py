"""`python -m service.client --file PATH` against a real in-process server: the file translated as one
document (its format from --format or the extension) is TranslateDocument's answer, written byte for byte
to stdout or --output, with a progress bar of the segments on stderr; flags that do not go with it exit 2."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service import client
from service.server import BackgroundServer
from tests.support.server import TEXTS


@pytest.fixture(scope="module")
def stub(server: BackgroundServer) -> Iterator[pb_grpc.TranslatorStub]:
    """A translator.v1 stub of the service tests' server (tests/service/conftest.py)."""
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.TranslatorStub(channel)


def run(server: BackgroundServer, *args: str, out: io.TextIOBase | None = None) -> tuple[int, str]:
    """Exit code and stdout of the client."""
    out = io.StringIO() if out is None else out
    code = client.main(["--address", server.address, "--timeout", "30", *args], out=out)
    return code, out.getvalue() if isinstance(out, io.StringIO) else ""


def translated(stub: pb_grpc.TranslatorStub, document: str, fmt: int) -> pb.TranslateDocumentResponse:
    """TranslateDocument's answer."""
    request = pb.TranslateDocumentRequest(document=document, format=fmt)
    return stub.TranslateDocument(request, timeout=60)


MARKDOWN = f"# {TEXTS[0]}\n\n- {TEXTS[1]}\n- {TEXTS[2]}\n\n```\n{TEXTS[3]}\n```\n"


def test_a_markdown_file_comes_back_as_translate_document_answers_it(server, stub, tmp_path, capsys):
    path = tmp_path / "page.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    want = translated(stub, MARKDOWN, pb.DOCUMENT_FORMAT_MARKDOWN)
    assert want.segments == 3 and want.document.startswith("# ") and want.document.endswith("```\n")
    assert run(server, "--file", str(path)) == (0, want.document)  # no newline added
    err = capsys.readouterr().err
    assert "page.md" in err and "3/3" in err and "segment" in err  # tqdm's bar: done / total
    plain = translated(stub, MARKDOWN, pb.DOCUMENT_FORMAT_TEXT).document
    assert plain != want.document  # the format matters: read as text, the code block is translated too
    assert run(server, "--file", str(path), "--format", "text") == (0, plain)


def test_the_extension_picks_the_format(server, stub, tmp_path):
    html = f"<p>{TEXTS[0]}</p><script>var a = '{TEXTS[1]}';</script>"
    for name, fmt in [("a.html", pb.DOCUMENT_FORMAT_HTML), ("b.HTM", pb.DOCUMENT_FORMAT_HTML),
                      ("c.txt", pb.DOCUMENT_FORMAT_TEXT), ("d", pb.DOCUMENT_FORMAT_TEXT)]:
        (tmp_path / name).write_text(html, encoding="utf-8")
        assert run(server, "--file", str(tmp_path / name)) == (0, translated(stub, html, fmt).document), name


def test_the_bytes_are_written_as_they_are(server, stub, tmp_path):
    document = f"{TEXTS[0]}\r\n\r\n{TEXTS[1]}"
    path = tmp_path / "crlf.txt"
    path.write_bytes(document.encode("utf-8"))
    want = translated(stub, document, pb.DOCUMENT_FORMAT_TEXT).document.encode("utf-8")
    assert b"\r\n\r\n" in want and not want.endswith(b"\n")
    assert run(server, "--file", str(path), "--output", str(tmp_path / "out.txt")) == (0, "")
    assert (tmp_path / "out.txt").read_bytes() == want
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="ascii", newline="\r\n")  # a text layer would change the bytes
    assert run(server, "--file", str(path), out=stdout)[0] == 0
    assert raw.getvalue() == want


@pytest.mark.parametrize(("flags", "says"), [
    (["--file", "{doc}", "we 7 big."], "--file translates one document"),
    (["--file", "{doc}", "--stream"], "--file translates one document"),
    (["--file", "{doc}", "--score", "x"], "--file translates one document"),
    (["--file", "{doc}", "--v2"], "--file translates one document"),
    (["--file", "{doc}", "--beam", "2", "--n-best", "2"], "--file translates one document"),
    (["--output", "x.txt", "we 7 big."], "go with --file"),
    (["--file", "{missing}"], "--file: "),
    (["--file", "{latin1}"], "not UTF-8"),
])
def test_flags_that_do_not_go_with_a_file_exit_2(server, tmp_path, capsys, flags, says):
    (tmp_path / "doc.txt").write_text("we 7 big.", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9.".encode("latin-1"))
    paths = {name: tmp_path / f"{name}.txt" for name in ("doc", "missing", "latin1")}
    with pytest.raises(SystemExit) as info:
        run(server, *[f.format(**paths) for f in flags])
    assert info.value.code == 2 and says in capsys.readouterr().err


def test_errors_of_the_call_print_the_status_and_exit_1(server, tmp_path: Path, capsys):
    path = tmp_path / "doc.txt"
    path.write_text(TEXTS[0], encoding="utf-8")
    assert run(server, "--file", str(path), "--protect", "[")[0] == 1
    assert "error: INVALID_ARGUMENT: " in capsys.readouterr().err
