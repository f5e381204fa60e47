"""The protocols chart: throughput against p50 / p99 latency, one curve per protocol."""

from __future__ import annotations

from bench.charts import protocols
from bench.charts.draw import draw
from model.plotting import pyplot
from tests.support.svg import in_view, read_svg

KINDS = ("grpc", "kserve-grpc", "http-infer", "http-generate")


def test_the_chart_has_a_p50_and_a_p99_curve_per_protocol_and_its_labels(protocols_record, tmp_path):
    (path,) = draw(protocols_record, tmp_path / "protocols")
    assert path == tmp_path / "protocols-latency-throughput.svg"
    chart = read_svg(path)
    curves = {i for i in chart.ids if i.endswith(("-p50", "-p99"))}
    assert curves == {f"{k}-{q}" for k in KINDS for q in ("p50", "p99")}
    assert chart.has_text("throughput (sentences/s)")
    assert chart.has_text("p50 latency (ms, client side)") and chart.has_text("p99 latency (ms, client side)")
    for name in protocols_record["protocols"].values():
        assert chart.has_text(name)
    assert chart.has_text("c1") and chart.has_text("c64")
    assert chart.has_text("600 to 1,200 requests a point, pooled over 3 interleaved rounds")
    assert chart.has_text("python -m bench --quick") and chart.has_text("2026-01-02 03:04 UTC")


def test_one_curve_per_protocol_even_one_not_known(protocols_record, tmp_path):
    extra = [{**p, "protocol": "http-binary"} for p in protocols_record["points"] if p["protocol"] == "grpc"]
    record = {**protocols_record, "points": protocols_record["points"] + extra}
    fig = protocols.figure(record)
    gids = [line.get_gid() for line in fig.axes[0].get_lines()]
    assert gids == [f"{k}-p50" for k in (*KINDS, "http-binary")]
    pyplot().close(fig)


def test_the_chart_shows_the_largest_p99_and_the_highest_throughput(protocols_record):
    fig = protocols.figure(protocols_record)
    p50, p99 = fig.axes
    (generate,) = [li for li in p99.get_lines() if li.get_gid() == "http-generate-p99"]
    assert max(generate.get_ydata()) == 876.0 == max(p["p99_ms"] for p in protocols_record["points"])
    top = next(p for p in protocols_record["points"] if p["p99_ms"] == 876.0)
    assert in_view(p99, top["throughput"], 876.0)
    (grpc,) = [li for li in p50.get_lines() if li.get_gid() == "grpc-p50"]
    assert list(grpc.get_xdata())[-1] == 412.5 == max(p["throughput"] for p in protocols_record["points"])
    fastest = next(p for p in protocols_record["points"] if p["throughput"] == 412.5)
    assert in_view(p50, 412.5, fastest["p50_ms"]) and in_view(p99, 412.5, fastest["p99_ms"])
    pyplot().close(fig)
