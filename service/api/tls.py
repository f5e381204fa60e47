"""TLS and mutual TLS for the gRPC server and its command-line clients (PEM files only).

Server: `server_credentials(cert, key)` serves TLS; with `client_ca` every client must present a certificate
signed by that CA (mutual TLS). Clients (service/client.py, service/healthcheck.py): `open_channel(address,
ca_cert=..., client_cert=..., client_key=...)` is plaintext without a CA and TLS with one, presenting a client
certificate when given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc


def _read(path: str | Path, what: str) -> bytes:
    """The bytes of a PEM file; OSError naming the file's role when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def server_credentials(cert: str | Path, key: str | Path,
                       client_ca: str | Path | None = None) -> grpc.ServerCredentials:
    """TLS credentials of the server; with client_ca, client certificates are required (mTLS)."""
    key_and_chain = (_read(key, "TLS private key"), _read(cert, "TLS certificate"))
    if client_ca is None:
        return grpc.ssl_server_credentials([key_and_chain])
    return grpc.ssl_server_credentials([key_and_chain], root_certificates=_read(client_ca, "client CA"),
                                       require_client_auth=True)


def channel_credentials(ca_cert: str | Path, client_cert: str | Path | None = None,
                        client_key: str | Path | None = None) -> grpc.ChannelCredentials:
    """TLS credentials trusting ca_cert, with a client certificate and key for mutual TLS."""
    if (client_cert is None) != (client_key is None):
        raise ValueError("a client certificate and its key go together")
    chain = _read(client_cert, "client certificate") if client_cert is not None else None
    key = _read(client_key, "client key") if client_key is not None else None
    return grpc.ssl_channel_credentials(root_certificates=_read(ca_cert, "CA certificate"),
                                        private_key=key, certificate_chain=chain)


def open_channel(address: str, ca_cert: str | Path | None = None, client_cert: str | Path | None = None,
                 client_key: str | Path | None = None, server_name: str | None = None,
                 options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A blocking channel: plaintext without ca_cert, TLS (mutual with a client certificate) with it.
    server_name: the name the server's certificate must carry when it differs from the address'
    host (e.g. the health check connects to 127.0.0.1, the certificate names the service)."""
    if ca_cert is None:
        if client_cert is not None:
            raise ValueError("a client certificate needs TLS: give the CA certificate too")
        return grpc.insecure_channel(address, options=list(options))
    credentials = channel_credentials(ca_cert, client_cert, client_key)
    if server_name:
        options = [*options, ("grpc.ssl_target_name_override", server_name)]
    return grpc.secure_channel(address, credentials, options=list(options))


def add_client_flags(parser: Any, env_prefix: str = "TRANSLATOR_") -> None:
    """--ca-cert, --client-cert, --client-key and --server-name on an argparse parser, each defaulting
    to an environment variable (TRANSLATOR_CA_CERT, ...)."""
    flags = {"--ca-cert": "PEM CA certificate of the server: connect with TLS",
             "--client-cert": "PEM client certificate (mutual TLS; needs --client-key)",
             "--client-key": "PEM private key of --client-cert",
             "--server-name": "name the server's certificate carries, if not the address' host"}
    for flag, text in flags.items():
        env = env_prefix + flag.lstrip("-").replace("-", "_").upper()
        parser.add_argument(flag, default=os.environ.get(env) or None, help=f"{text} [{env}]")
