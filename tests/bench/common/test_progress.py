"""Progress: plain lines where the output is no terminal, a tqdm bar where it is one."""

from __future__ import annotations

import io

from bench.common.progress import Progress


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_tty():
    out = io.StringIO()
    with Progress(1000, "soak", out, lines=4) as bar:
        for i in range(1000):
            bar.update(1, f"RSS {i} MiB")
    assert out.getvalue().splitlines() == [
        "soak: 250/1000 (25%) RSS 249 MiB", "soak: 500/1000 (50%) RSS 499 MiB",
        "soak: 750/1000 (75%) RSS 749 MiB", "soak: 1000/1000 (100%) RSS 999 MiB"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_every_phase_is_a_line_and_the_end_is_always_said():
    out = io.StringIO()
    with Progress(3, "bench phases", out, lines=3) as bar:
        for phase in ("engines", "server", "scaling"):
            bar.update(1, f"{phase} done")
    assert out.getvalue().splitlines() == ["bench phases: 1/3 (33%) engines done",
                                           "bench phases: 2/3 (67%) server done",
                                           "bench phases: 3/3 (100%) scaling done"]
    out = io.StringIO()
    with Progress(7, "odd", out, lines=2) as bar:
        bar.update(7)
    assert out.getvalue().splitlines() == ["odd: 7/7 (100%)"]


def test_a_bar_on_a_terminal():
    out = Terminal()
    with Progress(10, "soak", out) as bar:
        for _ in range(10):
            bar.update(1, "RSS 1 MiB")
    text = out.getvalue()
    assert "\r" in text and "soak" in text and "10/10" in text
    assert "soak: 10/10 (100%)" not in text  # no plain lines beside the bar
