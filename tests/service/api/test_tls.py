"""TLS and mutual TLS on the real server, with certificates made here (cryptography): who gets in
and who does not, and the client and health-check CLIs speaking TLS."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service import client, healthcheck
from service.api import tls
from service.config import parse_config
from service.domain.types import DecodeOptions
from service.server import BackgroundServer
from tests.support.decoding import best_texts, best_tokens
from tests.support.pki import SERVER_NAME, Authority
from tests.support.server import TEXTS, server_config

OPTIONS = pb.TranslateOptions(max_output_tokens=12)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA with a server and a client certificate, and a stranger CA with its own client."""
    directory = tmp_path_factory.mktemp("pki")
    ca, stranger = Authority(directory, "ca"), Authority(directory, "stranger-ca")
    server_cert, server_key = ca.issue("server", server=True)
    client_cert, client_key = ca.issue("client", server=False)
    other_cert, other_key = stranger.issue("other-client", server=False)
    return {"ca": ca.path, "stranger_ca": stranger.path, "server_cert": server_cert,
            "server_key": server_key, "client_cert": client_cert, "client_key": client_key,
            "other_cert": other_cert, "other_key": other_key}


@pytest.fixture(scope="module")
def tls_server(tiny_bundle, runner, pki) -> Iterator[BackgroundServer]:
    """A server with TLS (no client certificates asked)."""
    config = server_config(tiny_bundle, tls_cert=pki["server_cert"], tls_key=pki["server_key"])
    with BackgroundServer(config, runner) as srv:
        yield srv


@pytest.fixture(scope="module")
def mtls_server(tiny_bundle, runner, pki) -> Iterator[BackgroundServer]:
    """A server with mutual TLS: client certificates signed by the CA required."""
    config = server_config(tiny_bundle, tls_cert=pki["server_cert"], tls_key=pki["server_key"],
                           tls_client_ca=pki["ca"])
    with BackgroundServer(config, runner) as srv:
        yield srv


def translate(channel: grpc.Channel) -> list[int]:
    """One Translate call's token ids."""
    request = pb.TranslateRequest(texts=[TEXTS[1]], options=OPTIONS)
    reply = pb_grpc.TranslatorStub(channel).Translate(request, timeout=10)
    return list(reply.results[0].hypotheses[0].token_ids)


def refused(channel: grpc.Channel) -> grpc.StatusCode:
    """The status of a call that must not get through."""
    with pytest.raises(grpc.RpcError) as err:
        translate(channel)
    return err.value.code()


def test_tls_client_works_plaintext_and_untrusting_clients_fail(tls_server, runner, pki):
    """A client trusting the CA translates; a plaintext client or one trusting another CA does not."""
    want = best_tokens(runner, TEXTS[1], DecodeOptions(max_output_tokens=12))
    with tls.open_channel(tls_server.address, pki["ca"]) as channel:
        assert translate(channel) == want
    with grpc.insecure_channel(tls_server.address) as channel:
        assert refused(channel) == grpc.StatusCode.UNAVAILABLE
    with tls.open_channel(tls_server.address, pki["stranger_ca"]) as channel:
        assert refused(channel) == grpc.StatusCode.UNAVAILABLE


def test_mtls_requires_a_client_certificate_signed_by_the_ca(mtls_server, runner, pki):
    """Without a client certificate, or with one from another CA: refused. With the CA's: served."""
    want = best_tokens(runner, TEXTS[1], DecodeOptions(max_output_tokens=12))
    with tls.open_channel(mtls_server.address, pki["ca"]) as channel:
        assert refused(channel) == grpc.StatusCode.UNAVAILABLE
    with tls.open_channel(mtls_server.address, pki["ca"], pki["other_cert"], pki["other_key"]) as channel:
        assert refused(channel) == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(mtls_server.address) as channel:
        assert refused(channel) == grpc.StatusCode.UNAVAILABLE
    with tls.open_channel(mtls_server.address, pki["ca"], pki["client_cert"], pki["client_key"]) as channel:
        assert translate(channel) == want


def test_health_check_cli_speaks_tls_and_mtls(tls_server, mtls_server, pki, capsys):
    """`python -m service.healthcheck --ca-cert ...` exits 0 (SERVING) over TLS, with a client
    certificate over mTLS, also through a name other than the address (--server-name); without the
    certificate the mTLS check fails with exit code 1."""
    port = tls_server.address.rsplit(":", 1)[1]
    for argv in (["--address", tls_server.address, "--ca-cert", str(pki["ca"])],
                 ["--address", f"127.0.0.1:{port}", "--ca-cert", str(pki["ca"]),
                  "--server-name", SERVER_NAME],
                 ["--address", mtls_server.address, "--ca-cert", str(pki["ca"]),
                  "--client-cert", str(pki["client_cert"]), "--client-key", str(pki["client_key"])]):
        with pytest.raises(SystemExit) as exit_:
            healthcheck.main(argv)
        assert exit_.value.code == 0 and capsys.readouterr().out.strip() == "SERVING"
    with pytest.raises(SystemExit) as exit_:
        healthcheck.main(["--address", mtls_server.address, "--ca-cert", str(pki["ca"]), "--timeout", "3"])
    assert exit_.value.code == 1 and "health check failed: UNAVAILABLE" in capsys.readouterr().err


def test_client_cli_speaks_mtls(mtls_server, runner, pki, monkeypatch):
    """`python -m service.client` with --ca-cert / --client-cert / --client-key (or their TRANSLATOR_*
    variables) translates; without the client certificate it reports UNAVAILABLE, exit code 1."""
    (want,) = best_texts(runner, [TEXTS[2]])
    out = io.StringIO()
    argv = ["--address", mtls_server.address, "--ca-cert", str(pki["ca"]),
            "--client-cert", str(pki["client_cert"]), "--client-key", str(pki["client_key"]), TEXTS[2]]
    assert client.main(argv, out) == 0 and out.getvalue() == want + "\n"
    monkeypatch.setenv("TRANSLATOR_CA_CERT", str(pki["ca"]))
    monkeypatch.setenv("TRANSLATOR_CLIENT_CERT", str(pki["client_cert"]))
    monkeypatch.setenv("TRANSLATOR_CLIENT_KEY", str(pki["client_key"]))
    out = io.StringIO()
    assert client.main(["--address", mtls_server.address, "--v2", TEXTS[2]], out) == 0
    assert out.getvalue() == want + "\n"
    monkeypatch.delenv("TRANSLATOR_CLIENT_CERT")
    monkeypatch.delenv("TRANSLATOR_CLIENT_KEY")
    assert client.main(["--address", mtls_server.address, "--timeout", "3", TEXTS[2]], io.StringIO()) == 1


@pytest.mark.parametrize("argv", [["--tls-client-ca", "ca.pem"],
                                  ["--tls-cert", "c.pem", "--tls-client-ca", "ca.pem"]])
def test_mtls_flags_need_a_server_certificate(argv):
    """--tls-client-ca alone, or a certificate without its key: usage error (exit code 2)."""
    with pytest.raises(SystemExit) as exc:
        parse_config(argv, {})
    assert exc.value.code == 2
