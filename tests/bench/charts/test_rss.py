"""Server RSS over a long run, with the warm-up marked."""

from __future__ import annotations

from bench.charts import rss
from model.plotting import pyplot
from tests.support.svg import in_view, read_svg


def test_rss_curve_with_the_warmup_marked(rss_record, tmp_path):
    chart = read_svg(rss.draw(rss_record, tmp_path / "rss.svg"))
    assert {"rss", "warmup", "after-warmup", "started", "peak"} <= chart.ids
    for text in ("warm-up (1,000 requests)", "requests sent (warm-up included)", "server RSS (MiB)",
                 "RSS at each fifth", "test soak"):
        assert chart.has_text(text), text


def test_samples_are_placed_after_the_warmup_and_the_highest_is_shown(rss_record):
    fig = rss.figure(rss_record)
    ax = fig.axes[0]
    (line,) = [li for li in ax.get_lines() if li.get_gid() == "rss"]
    assert list(line.get_xdata()) == [2000, 3000, 4000, 5000, 6000]  # 1,000 warm-up requests first
    assert max(line.get_ydata()) == 231.5 and in_view(ax, 3000, 231.5)
    assert ax.get_ylim()[0] == 0  # from zero: a flat curve looks flat
    texts = [t.get_text() for t in ax.texts]
    assert "highest 231.5 MiB" in texts
    pyplot().close(fig)


def test_without_a_warmup_nothing_is_shaded(rss_record, tmp_path):
    record = {**rss_record, "warmup_requests": 0, "warm_mib": None, "started_mib": None}
    chart = read_svg(rss.draw(record, tmp_path / "rss.svg"))
    assert "rss" in chart.ids and "warmup" not in chart.ids and "after-warmup" not in chart.ids
