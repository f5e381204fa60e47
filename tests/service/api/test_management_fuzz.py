"""The management surfaces under the fuzz driver, a fixed-seed sample (tests/support/fuzz.py
`management_targets`): the repository API over gRPC and HTTP and ModelMesh's calls, with hostile names,
parameters, configs, ids and paths, each carrying the restricted groups' header right or wrong. Every answer
is a clear status with a clean message, a call without the right header gets exactly Triton's refusal, and
the server is put back and serves after every round; the oracle catches a planted bug of each kind."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.api import restrictions
from service.api.restrictions import GRPC, HTTP, restriction_table
from service.dataplane.calls import DataPlane
from service.server import BackgroundServer
from tests.support.fuzz import Report, fuzz, management_targets
from tests.support.hostile_exchange import Exchange
from tests.support.hostile_management import Admin
from tests.support.repository import link_repository
from tests.support.server import server_config

MODEL, SPARE = "translator", "spare"
KEY, VALUE = "admin-key", "s3cret value"
SEED = 20240611
EXAMPLES = 150  # 50 per surface: one round each, the server checked after each


@pytest.fixture(scope="module")
def admin(tmp_path_factory, tiny_bundle: Path) -> Iterator[Admin]:
    """A server of a two-model repository (the tiny bundle twice), control mode explicit, one model
    loaded, ModelMesh served, the repository groups (and modelmesh) restricted with one key."""
    root = link_repository(tmp_path_factory.mktemp("management"), tiny_bundle, [(MODEL, 1), (SPARE, 1)])
    grpc_table = restriction_table(GRPC, [f"model-repository,modelmesh:{KEY}={VALUE}"])
    http_table = restriction_table(HTTP, [f"model-repository:{KEY}={VALUE}"])
    config = server_config(tiny_bundle, model_repository=root, model_control_mode="explicit",
                           load_model=(MODEL,), http_port=0, modelmesh=True,
                           grpc_restricted_protocol=grpc_table, http_restricted_api=http_table)
    with BackgroundServer(config) as server:
        yield Admin(server.address, server.http_address, KEY, VALUE, MODEL, SPARE, root)


def run(admin: Admin, examples: int = EXAMPLES) -> tuple[Report, str]:
    """The fuzz driver over the management targets: (report, what it printed)."""
    exchange = Exchange(admin)
    out = io.StringIO()
    try:
        report = fuzz(examples, 0, SEED, out=out, targets=management_targets(admin, exchange),
                      after_round=exchange.settle)
    finally:
        exchange.close()
    return report, out.getvalue()


def test_every_management_call_gets_a_clear_answer_and_the_server_stays_ready(admin):
    report, printed = run(admin)
    assert report.findings == [], printed
    assert set(report.targets) == {"repository_grpc", "repository_http", "modelmesh"}
    for name, stats in report.targets.items():  # every surface was reached, accepted and refused
        assert stats.examples >= 50 and 0 < stats.accepted < stats.examples, (name, stats)


def test_the_oracle_catches_an_internal_error(admin, monkeypatch):
    """A load that fails with an unexpected exception answers INTERNAL: a finding."""
    async def broken(self, name, given, repository=""):
        raise RuntimeError("planted")

    monkeypatch.setattr(DataPlane, "load", broken)
    report, printed = run(admin, 30)
    assert report.failures and "status not allowed" in printed and "INTERNAL" in printed, printed


def test_the_oracle_catches_an_open_door(admin, monkeypatch):
    """A gate that lets every call through: a call with a wrong or missing header is answered, a finding."""
    monkeypatch.setattr(restrictions.Gate, "refusal", lambda self, call, header: None)
    report, printed = run(admin, 30)
    assert report.failures and "expected the refusal" in printed, printed
