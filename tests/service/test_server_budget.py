"""A server of three models of the default bundle, on-demand, under a memory budget of about two models'
charges: requests to each model in turn are all answered as a server with no budget answers them, no more
models stay loaded than their charges fit, least recently used ones are evicted, the sessions run without
ONNX Runtime's CPU arena, the resident-bytes gauge reports the repository's charges, and the charges cover
the process's peak while a model serves a batch at the server's limits."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from protos.translator.v1 import translator_pb2 as pb
from protos.translator.v1 import translator_pb2_grpc as pb_grpc
from service.models.footprint import text_of
from service.models.repository import ModelRepository
from service.ops.malloc import tune_malloc
from service.ops.memory import PeakWatch
from service.server import BackgroundServer
from tests.support import REPO_ROOT
from tests.support.metrics import sample
from tests.support.repository import link_repository
from tests.support.server import TEXTS, server_config

BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
NAMES = ("a", "b", "c")
ROUNDS = 2
BUDGET_MODELS = 2.4  # the budget in charges of one model: two fit and three do not, with room to spare
HUGE_BUDGET = 2**40  # measures the charges as a budget does, and never binds


@pytest.fixture(scope="module", autouse=True)
def server_malloc() -> None:
    """glibc malloc as a server process sets it (service/server.py main), so that loads are charged as in a
    server (with glibc's defaults the charges vary too much for two to fit surely and three surely not)."""
    tune_malloc()


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """Three models, each a link to the default bundle."""
    return link_repository(tmp_path_factory.mktemp("budget"), BUNDLE, [(name, 1) for name in NAMES])


def server(repository: Path, budget: int = 0) -> BackgroundServer:
    """An on-demand server of the repository (not started) under `budget` bytes (0: none)."""
    return BackgroundServer(server_config(BUNDLE, model_repository=repository, model_control_mode="on-demand",
                                          memory_budget=budget))


def answers(srv: BackgroundServer, name: str) -> list[str]:
    """The best translation of each of TEXTS by model `name`, in one request."""
    with grpc.insecure_channel(srv.address) as channel:
        reply = pb_grpc.TranslatorStub(channel).Translate(pb.TranslateRequest(texts=TEXTS, model=name),
                                                          timeout=120)
    return [result.hypotheses[0].text for result in reply.results]


def at_limits(srv: BackgroundServer, name: str) -> None:
    """A batch at the server's limits to model `name`: as many texts as a batch takes rows, each of the
    longest source (within the batch's token budget), decoded to the longest output."""
    runner = srv.running.models.models[name][1].runner
    rows = srv.config.max_batch_size
    tokens = min(runner.max_len, srv.config.max_batch_tokens // rows)
    text = text_of(lambda t: len(runner.encode_texts([t])[0]), tokens)
    steps = runner.max_len - 1
    options = pb.TranslateOptions(max_output_tokens=steps, min_output_tokens=steps, beam_size=1)
    with grpc.insecure_channel(srv.address) as channel:
        reply = pb_grpc.TranslatorStub(channel).Translate(
            pb.TranslateRequest(texts=[text] * rows, model=name, options=options), timeout=300)
    assert [len(r.hypotheses[0].token_ids) for r in reply.results] == [steps] * rows


async def charges(repo: ModelRepository) -> dict[str, tuple[int, float, bool]]:
    """Each loaded model's charge, its resident-bytes gauge and whether its sessions use ORT's CPU arena,
    read at once on the server's loop."""
    out = {}
    for model in repo.loaded():
        arena = model.runner.sessions.encoder.get_session_options().enable_cpu_mem_arena
        gauge = sample("translator_model_resident_bytes", model=model.name, version=str(model.version))
        out[model.name] = (model.resident_bytes, gauge, arena)
    return out


def test_three_models_take_turns_under_a_budget_that_fits_two(repository):
    with server(repository) as plain:
        expected = {name: answers(plain, name) for name in NAMES}
    with server(repository, HUGE_BUDGET) as sizing:
        for name in NAMES:
            answers(sizing, name)
        sized = sizing.call(charges(sizing.running.models))
    budget = int(BUDGET_MODELS * sum(c for c, _, _ in sized.values()) / len(sized))
    loads = sample("translator_model_loads_total", result="ok")
    evictions = sample("translator_model_unloads_total", reason="evicted")
    with server(repository, budget) as srv:
        seen = []
        for _ in range(ROUNDS):
            for name in NAMES:
                assert answers(srv, name) == expected[name]
                now = srv.call(charges(srv.running.models))
                seen.append(sorted(now))
                assert sum(c for c, _, _ in now.values()) <= budget
                assert all(gauge == c and not arena for c, gauge, arena in now.values())
        charged = sum(c for c, _, _ in srv.call(charges(srv.running.models)).values())
        with PeakWatch() as watch:
            at_limits(srv, "c")
        assert watch.peak - srv.running.models.growth.base <= charged
        last = sorted(srv.call(charges(srv.running.models)))
    # two fit: a, then a b; from then on each load evicts the least recently used (c evicts a, a evicts b,
    # b evicts c, c evicts a), and growth charged to a model may evict the other too: what stays loaded is
    # always the one or two models used last, never all three
    used = [name for _ in range(ROUNDS) for name in NAMES]
    assert seen[:2] == [["a"], ["a", "b"]]
    assert all(now in (sorted(used[k - 1:k + 1]), [used[k]]) for k, now in enumerate(seen) if k >= 2), seen
    assert sample("translator_model_loads_total", result="ok") - loads == 6
    assert last in (["b", "c"], ["c"])
    # each of the 4 loads after a and b's evicts what the one before left, less what stays at the end
    assert sample("translator_model_unloads_total", reason="evicted") - evictions == 6 - len(last), seen
