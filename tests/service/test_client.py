"""`python -m service.client` against a real in-process server: native, streaming, v2, info, errors."""

from __future__ import annotations

import io
import json
import shutil
import subprocess

import pytest

from service import client
from service.domain.types import DEFAULT_MAX_BEAM, DecodeOptions
from service.server import BackgroundServer
from tests.support.decoding import best_texts
from tests.support.server import TEXTS, server_config


@pytest.fixture(scope="module")
def address(server: BackgroundServer) -> str:
    """host:port of the service tests' server (tests/service/conftest.py)."""
    return server.address


def run(address: str, *args: str) -> tuple[int, str]:
    """Exit code and stdout of the client."""
    out = io.StringIO()
    code = client.main(["--address", address, "--timeout", "30", *args], out=out)
    return code, out.getvalue()


def test_translate_prints_one_line_per_text(address, runner):
    """One output line per input text, the runner's translations."""
    assert run(address, *TEXTS[:2]) == (0, "".join(t + "\n" for t in best_texts(runner, TEXTS[:2])))


def test_v2_prints_the_same(address, runner):
    """--v2 with beam and max tokens prints the runner's translations."""
    want = best_texts(runner, TEXTS[:2], DecodeOptions(beam_size=2, max_output_tokens=9))
    assert run(address, "--v2", "--beam", "2", "--max-tokens", "9", *TEXTS[:2]) == (
        0, "".join(t + "\n" for t in want))


def test_stream_prints_the_pieces_then_ends_the_line(address, runner):
    """--stream prints the pieces, which add up to the translation."""
    assert run(address, "--stream", "--max-tokens", "20", TEXTS[0]) == (
        0, best_texts(runner, TEXTS[:1], DecodeOptions(max_output_tokens=20))[0] + "\n")


def test_n_best_scores_and_alignment(address, runner):
    """--n-best numbers the hypotheses; --scores and --alignment print their details."""
    code, out = run(address, "--beam", "3", "--n-best", "2", "--scores", "--alignment", "--max-tokens", "6",
                    TEXTS[2])
    hyps = runner.translate([TEXTS[2]], DecodeOptions(beam_size=3, n_best=2, max_output_tokens=6))[0]
    lines = out.splitlines()
    assert code == 0
    ranked = [line for line in lines if line[:3] in ("1. ", "2. ")]
    assert ranked == [f"{rank}. {h.text}" for rank, h in enumerate(hyps, 1)]
    assert f"score={hyps[0].score:.4f} log_prob={hyps[0].log_prob:.4f}" in out
    first_source_token = runner.tokenizer.token(runner.encode_texts([TEXTS[2]])[0][0])
    headers = [line for line in lines if line.startswith("   alignment")]
    assert len(headers) == 2 and all(first_source_token in h for h in headers)
    rows = [line for line in lines if line.startswith("   ") and line not in headers and "score=" not in line]
    assert len(rows) == sum(len(h.tokens) for h in hyps)  # one alignment row per output token


def test_info_prints_json(address, runner):
    """--info prints GetModelInfo as JSON."""
    code, out = run(address, "--info")
    info = json.loads(out)
    assert code == 0 and info["modelName"] == "translator"
    assert info["bundle"]["version"] == runner.bundle.version
    assert info["executionProviders"] == ["CPUExecutionProvider"]


def test_errors_print_the_status_and_exit_1(address, capsys):
    """RPC errors print the status name and message and exit 1."""
    assert run(address, "--beam", "99", "we")[0] == 1
    err = capsys.readouterr().err
    assert f"error: INVALID_ARGUMENT: beam_size must be between 1 and {DEFAULT_MAX_BEAM}" in err
    assert run(address, "--v2", " ")[0] == 1
    assert "error: INVALID_ARGUMENT: text 0 is empty" in capsys.readouterr().err


def test_controlled_decoding_flags(address, runner, capsys):
    """The controlled-decoding flags reach the server over both APIs: the runner's translations with the
    same options; alternatives print numbered; a bad value is the server's INVALID_ARGUMENT."""
    text = TEXTS[1]
    first = runner.translate([text], DecodeOptions(max_output_tokens=12))[0][0].tokens[0]
    flags = ["--max-tokens", "12", "--prefix", "the", "--suppress", "red", "--suppress-ids", str(first),
             "--min-tokens", "3", "--repetition-penalty", "1.25", "--no-repeat-ngram", "2", "--disable-unk",
             "--max-length-ratio", "4"]
    options = DecodeOptions(max_output_tokens=12, target_prefix="the", suppress_sequences=("red", [first]),
                            min_output_tokens=3, repetition_penalty=1.25, no_repeat_ngram_size=2,
                            disable_unk=True,
                            max_length_ratio=4.0)
    want = best_texts(runner, [text], options)[0] + "\n"
    assert run(address, *flags, text) == (0, want)
    assert run(address, "--v2", *flags, text) == (0, want)
    sampling = ["--max-tokens", "12", "--temperature", "0.75", "--top-k", "20", "--top-p", "0.875",
                "--seed", "5"]  # values a float32 holds exactly
    want = best_texts(runner, [text], DecodeOptions(max_output_tokens=12, temperature=0.75, top_k=20,
                                                    top_p=0.875, seed=5))[0] + "\n"
    assert run(address, *sampling, text) == run(address, "--v2", *sampling, text) == (0, want)
    code, out = run(address, "--alternatives", "--n-best", "3", "--prefix-ids", "5,6", text)
    assert code == 0 and [line[:3] for line in out.splitlines()] == ["1. ", "2. ", "3. "], out
    assert run(address, "--top-p", "1.5", text)[0] == 1
    assert "error: INVALID_ARGUMENT: top_p must be in (0, 1], got 1.5" in capsys.readouterr().err


def test_bad_flags_exit_2():
    """Inconsistent flags are a usage error."""
    with pytest.raises(SystemExit) as exc:
        client.main(["--stream", "a", "b"])
    assert exc.value.code == 2
    for flags in (["--v2", "--alternatives"], ["--seed", "-1"], ["--prefix-ids", "5,x"]):
        with pytest.raises(SystemExit) as exc:
            client.main([*flags, "a"])
        assert exc.value.code == 2, flags


def test_tls_round_trip(tiny_bundle, runner, tmp_path):
    """A TLS server answers a client that trusts its certificate and refuses a plaintext one."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=test", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    with BackgroundServer(server_config(tiny_bundle, tls_cert=cert, tls_key=key), runner) as srv:
        want = best_texts(runner, TEXTS[1:2])[0]
        assert run(srv.address, "--ca-cert", str(cert), TEXTS[1]) == (0, want + "\n")
        assert run(srv.address, "--timeout", "5", TEXTS[1])[0] == 1  # plaintext to a TLS port fails


def test_model_flags_address_a_model(address, runner):
    """--model / --model-version reach the server: the served model by name, an unknown one NOT_FOUND."""
    (expected,) = best_texts(runner, TEXTS[:1])
    for flags in (["--model", "translator"], ["--model", "translator", "--model-version", "1", "--v2"]):
        code, out = run(address, *flags, TEXTS[0])
        assert (code, out) == (0, expected + "\n")
    code, out = run(address, "--model", "nope", TEXTS[0])
    assert code == 1
