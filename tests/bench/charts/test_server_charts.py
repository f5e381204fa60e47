"""The server's charts: throughput against p50 / p99 latency, and time to first token against concurrency."""

from __future__ import annotations

from bench.charts import latency, ttft
from model.plotting import pyplot
from tests.support.svg import in_view, read_svg


def test_latency_chart_has_a_p50_and_a_p99_curve_per_mode_and_workload(server_record, tmp_path):
    chart = read_svg(latency.draw(server_record, tmp_path / "lat.svg"))
    for workload in ("sentences", "mix"):
        for mode in ("none", "dynamic", "continuous"):
            assert {f"{workload}-{mode}-p50", f"{workload}-{mode}-p99"} <= chart.ids
        assert f"{workload}-continuous-no-budget-p50" not in chart.ids  # one point: no curve
    assert chart.has_text("throughput (sentences/s)") and chart.has_text("latency (ms, client side)")
    assert chart.has_text("sentences (one held-out sentence each)") and chart.has_text("c64")
    assert chart.has_text("python -m bench --quick") and chart.has_text("2026-01-02 03:04 UTC")


def test_latency_chart_shows_the_largest_p99(server_record):
    fig = latency.figure(server_record)
    mix = fig.axes[1]
    (line,) = [li for li in mix.get_lines() if li.get_gid() == "mix-none-p99"]
    top = next(p for p in server_record["points"] if p["p99_ms"] == 987.0)
    assert max(line.get_ydata()) == 987.0 == max(p["p99_ms"] for p in server_record["points"])
    assert in_view(mix, top["throughput"], 987.0)
    pyplot().close(fig)


def test_ttft_chart_has_its_curves_and_shows_the_largest_ttft(server_record, tmp_path):
    chart = read_svg(ttft.draw(server_record, tmp_path / "ttft.svg"))
    for mode in ("none", "dynamic", "continuous"):
        assert {f"sentences-{mode}-ttft-p50", f"mix-{mode}-ttft-p99"} <= chart.ids
    assert chart.has_text("time to first token (ms)") and chart.has_text("concurrency (closed-loop users)")
    fig = ttft.figure(server_record)
    (line,) = [li for li in fig.axes[1].get_lines() if li.get_gid() == "mix-none-ttft-p99"]
    assert list(line.get_xdata()) == [1, 8, 64] and max(line.get_ydata()) == 987.0 / 4
    assert in_view(fig.axes[1], 64, 987.0 / 4)
    pyplot().close(fig)
