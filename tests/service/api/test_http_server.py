"""The HTTP server's place in the process: its flags, TLS and mutual TLS from the gRPC flags, off
with --http-port -1, refusing with 503 while the models drain, metrics labelled by protocol."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import aiohttp
import pytest

from service.config import ServerConfig, parse_config
from service.server import BackgroundServer
from tests.support.decoding import best_texts
from tests.support.http import TIMEOUT_S, post_json
from tests.support.pki import Authority
from tests.support.server import TEXTS, server_config


def test_the_http_port_flag_and_its_environment_variable():
    assert ServerConfig().http_port == 8000  # Triton's: HTTP 8000 beside gRPC 8001 and metrics 8002
    assert parse_config([], env={}).http_port == 8000
    assert parse_config([], env={"TRANSLATOR_HTTP_PORT": "-1"}).http_port == -1
    assert parse_config(["--http-port", "0"], env={"TRANSLATOR_HTTP_PORT": "-1"}).http_port == 0
    assert parse_config(["--http-read-timeout-s", "2.5"], env={}).http_read_timeout_s == 2.5
    with pytest.raises(ValueError, match="--http-port"):
        ServerConfig(http_port=-2)


def test_http_off_serves_grpc_only(tiny_bundle, runner):
    with BackgroundServer(server_config(tiny_bundle, http_port=-1), runner) as srv:
        assert srv.running.http is None and srv.running.http_port is None and srv.running.port > 0


async def _generate(url: str, context: ssl.SSLContext | bool) -> tuple[int, dict]:
    """POST /generate over HTTPS with this TLS context."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session, \
            session.post(url, json={"text_input": TEXTS[1]}, ssl=context) as answer:
        return answer.status, await answer.json()


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_tls_and_mutual_tls_reuse_the_grpc_flags(tiny_bundle, runner, tmp_path: Path, mutual):
    """HTTPS with the server's certificate and key; with --tls-client-ca a client certificate is
    required; plaintext and clients without a certificate are refused."""
    ca = Authority(tmp_path, "ca")
    cert, key = ca.issue("server", server=True)
    client_cert, client_key = ca.issue("client", server=False)
    config = server_config(tiny_bundle, http_port=0, tls_cert=cert, tls_key=key,
                           tls_client_ca=ca.path if mutual else None)
    with BackgroundServer(config, runner) as srv:
        url = f"https://{srv.http_address}/v2/models/translator/generate"
        trusting = ssl.create_default_context(cafile=str(ca.path))
        if mutual:
            anonymous = ssl.create_default_context(cafile=str(ca.path))
            with pytest.raises(aiohttp.ClientError):
                asyncio.run(_generate(url, anonymous))
            trusting.load_cert_chain(client_cert, client_key)
        status, answer = asyncio.run(_generate(url, trusting))
        assert status == 200 and answer["text_output"] == best_texts(runner, [TEXTS[1]])[0]
        with pytest.raises(aiohttp.ClientError):
            asyncio.run(_generate(url.replace("https://", "http://"), False))


def test_requests_while_the_models_drain_are_503(tiny_bundle, runner):
    """Once the repository closes (the first step of a drain), HTTP requests get 503 with the reason
    and readiness is 400, as gRPC's UNAVAILABLE."""
    with BackgroundServer(server_config(tiny_bundle, http_port=0), runner) as srv:
        base = f"http://{srv.http_address}"
        srv.running.readiness.draining = True
        srv.call(srv.running.models.close(0.0))
        status, kind, body = post_json(f"{base}/v2/models/translator/generate", {"text_input": TEXTS[0]})
        assert (status, kind) == (503, "application/json") and "shutting down" in json.loads(body)["error"]

        async def ready() -> int:
            async with aiohttp.ClientSession() as session, session.get(f"{base}/v2/health/ready") as answer:
                return answer.status

        assert asyncio.run(ready()) == 400
