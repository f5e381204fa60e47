"""Container health check: exit 0 if the gRPC health service says SERVING, 1 otherwise.

    python -m service.healthcheck [--address 127.0.0.1:8001] [--timeout 3]
    python -m service.healthcheck --ca-cert ca.pem [--client-cert c.pem --client-key c.key] [--server-name n]

Plaintext unless a CA certificate is given (flag or TRANSLATOR_CA_CERT): then TLS, mutual with a client
certificate (TRANSLATOR_CLIENT_CERT / TRANSLATOR_CLIENT_KEY).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.api import tls


def check(address: str, timeout: float, service: str = "", ca_cert: str | None = None,
          client_cert: str | None = None, client_key: str | None = None,
          server_name: str | None = None) -> str:
    """The serving status name reported by the server at `address`."""
    with tls.open_channel(address, ca_cert, client_cert, client_key, server_name) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main(argv: Sequence[str] | None = None) -> None:
    """CLI entry point."""
    port = os.environ.get("TRANSLATOR_PORT", "8001")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", default=f"127.0.0.1:{port}")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--service", default="", help="service name ('' = the whole server)")
    tls.add_client_flags(ap)
    a = ap.parse_args(argv)
    try:
        status = check(a.address, a.timeout, a.service, a.ca_cert, a.client_cert, a.client_key, a.server_name)
    except grpc.RpcError as e:
        print(f"health check failed: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError) as e:
        print(f"health check failed: {e}", file=sys.stderr)
        sys.exit(1)
    print(status)
    sys.exit(0 if status == "SERVING" else 1)


if __name__ == "__main__":
    main()
