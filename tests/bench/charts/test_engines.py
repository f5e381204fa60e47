"""The engine comparison: sentences/s of engines and servers, and memory, as labelled bars."""

from __future__ import annotations

from bench.charts import engines
from model.plotting import pyplot
from tests.support.svg import in_view, read_svg


def test_bars_for_every_engine_in_every_panel(engines_record, tmp_path):
    chart = read_svg(engines.draw(engines_record, tmp_path / "engines.svg"))
    for name in ("ours-fp32", "ctranslate2-float32", "ours-int8", "ctranslate2-int8"):
        assert {f"engine-{name}", f"server-{name}", f"memory-{name}"} <= chart.ids
    for label in ("batch 32", "concurrency 1", "after a warm-up", "sentences/s (higher is better)",
                  "MiB added to a fresh process (Rss)", "CTranslate2 int8", "416, 296, 76, 76"):
        assert chart.has_text(label), label


def test_the_fastest_and_the_largest_bars_are_shown_with_their_values(engines_record, tmp_path):
    fig = engines.figure(engines_record)
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    assert max(heights) == 100.1 and in_view(fig.axes[0], 0, 100.1)
    memory = [bar.get_height() for bar in fig.axes[2].patches]
    assert max(memory) == 496 and in_view(fig.axes[2], 0, 496)
    pyplot().close(fig)
    chart = read_svg(engines.draw(engines_record, tmp_path / "engines.svg"))
    assert "100" in chart.texts and "496" in chart.texts  # the bars' value labels
