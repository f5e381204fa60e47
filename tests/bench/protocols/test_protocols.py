"""bench/protocols: what each protocol's client sends and accepts, and a short run on the tiny bundle that
records every protocol at every concurrency, answered, with its chart (no timing claims)."""

from __future__ import annotations

import json
import math

import pytest

from bench.common.loadgen import Record
from bench.protocols import clients
from bench.protocols.curve import CONCURRENCIES, Plan, pooled, run
from tests.support.corpus import tiny_pairs
from tests.support.svg import read_svg


def test_the_curve_takes_the_server_benchmarks_concurrencies_up_to_64():
    assert CONCURRENCIES == (1, 8, 32, 64)


def test_the_protocols_order_rotates_per_concurrency():
    plan = Plan(protocols=("a", "b", "c"))
    assert [plan.order(k) for k in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]
    assert Plan(min_requests=100, per_user=4).requests_at(8) == 100
    assert Plan(min_requests=100, per_user=4).requests_at(64) == 256


def test_each_http_protocol_sends_its_body_and_accepts_only_a_translation():
    assert clients.http_path("http-infer") == "/v2/models/translator/infer"
    assert clients.http_path("http-generate") == "/v2/models/translator/generate"
    assert clients.http_body("http-generate", "Hi 2.") == {"text_input": "Hi 2."}
    (tensor,) = clients.http_body("http-infer", "Hi 2.")["inputs"]
    assert tensor == {"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["Hi 2."]}
    assert clients.answered("http-generate", {"text_output": "Hi two."})
    assert not clients.answered("http-generate", {"error": "no"})
    assert clients.answered("http-infer", {"outputs": [{"name": "TRANSLATION"}]})
    assert not clients.answered("http-infer", {"outputs": []}) and not clients.answered("http-infer", [])
    (text,) = clients.kserve_request("Hi 2.").inputs
    assert (text.name, text.datatype, list(text.shape), list(text.contents.bytes_contents)) == \
        ("TEXT", "BYTES", [1], [b"Hi 2."])
    with pytest.raises(ValueError, match="unknown protocol 'smtp'"):
        clients.open_client("smtp", {}, ["x"], 1)


def test_a_short_run_records_every_protocol_at_every_concurrency(tiny_bundle, tmp_path, capsys):
    sources = tmp_path / "sources.tsv"
    sources.write_text("".join(f"{s}\t{t}\n" for s, t in tiny_pairs(20, 3)), encoding="utf-8")
    plan = Plan(concurrencies=(1, 3), min_requests=6, per_user=3, rounds=2, warmup_requests=4)
    figures = run(bundle=tiny_bundle, out=tmp_path / "out", plan=plan, sources=sources)
    record = json.loads((tmp_path / "out" / "protocols.json").read_text(encoding="utf-8"))
    assert record["kind"] == "protocols" and {"command", "machine", "date"} <= set(record["source"])
    assert record["protocols"] == clients.PROTOCOLS and record["rounds"] == 2
    grid = [(p["protocol"], p["concurrency"], p["requests"], p["errors"]) for p in record["points"]]
    assert grid == [(k, c, 2 * plan.requests_at(c), 0) for k in clients.PROTOCOLS for c in (1, 3)]
    for p in record["points"]:
        assert p["throughput"] > 0 and p["client_cpu_ms"] > 0
        assert 0 < p["p50_ms"] <= p["p90_ms"] <= p["p99_ms"]
    chart = read_svg(tmp_path / "out" / "protocols-latency-throughput.svg")
    assert {f"{k}-{q}" for k in clients.PROTOCOLS for q in ("p50", "p99")} <= chart.ids
    assert set(figures) == {"grpc_c3_per_s", "kserve_grpc_c3_per_s", "http_infer_c3_per_s",
                            "http_generate_c3_per_s", "http_infer_vs_grpc_c3"}
    assert "| http-generate | 3 | 18 |" in capsys.readouterr().out


def test_rounds_pool_their_requests_and_their_time():
    def rec(i: int, start: float, latency: float) -> Record:
        return Record(i, start, latency, math.nan, 5, "OK", False)

    first = [rec(0, 0.0, 1.0), rec(1, 1.0, 1.0)]  # 2 answers in 2 s
    second = [rec(0, 100.0, 0.5), rec(1, 100.0, 3.0)]  # 2 answers in 3 s, 97 s later
    s = pooled([first, second])
    assert (s.requests, s.ok, s.elapsed_s) == (4, 4, 5.0)
    assert s.throughput == pytest.approx(4 / 5.0) and s.tokens_per_s == pytest.approx(20 / 5.0)
    assert s.p50_ms == pytest.approx(1000.0)
