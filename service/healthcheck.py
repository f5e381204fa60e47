"""Container health check: exit 0 if the gRPC health service says SERVING, 1 otherwise.

    python -m service.healthcheck [--address 127.0.0.1:8001] [--timeout 3]
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, timeout: float, service: str = "") -> str:
    """The serving status name reported by the server at `address`."""
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main() -> None:
    """CLI entry point."""
    port = os.environ.get("TRANSLATOR_PORT", "8001")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address", default=f"127.0.0.1:{port}")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--service", default="", help="service name ('' = the whole server)")
    a = ap.parse_args()
    try:
        status = check(a.address, a.timeout, a.service)
    except grpc.RpcError as e:
        print(f"health check failed: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(1)
    print(status)
    sys.exit(0 if status == "SERVING" else 1)


if __name__ == "__main__":
    main()
