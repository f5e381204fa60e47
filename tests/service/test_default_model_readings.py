"""The shipped default bundle reads the everyday classes as textnorm/verbalize.py's rules do: every written
form the conventions table names, alone and in sentences, near-misses copied, and other scripts and
symbols left as they are (the references come from the rules, never from the model)."""

from __future__ import annotations

import pytest

from service.runtime.runner import Runner
from tests.support import REPO_ROOT
from textnorm.verbalize import verbalize

BUNDLE = REPO_ROOT / "artifacts" / "default" / "bundle"
ALONE = [  # each class's written forms as the whole input
    "10°C", "-5 °F", "37.5°C", "1°C", "-5", "-3.2", "−12", "1990s", "1800s", "1700s", "1100s", "'90s",
    "the 60s", "1/2", "3/4", "2/3", "5/8", "1 1/2", "½", "06:05", "18:30", "23:00", "13:07", "2023-06-06",
    "1999-12-31", "Henry VIII", "World War II", "Chapter IV", "Louis XIV", "+44 20 7946 0958",
    "+1 (555) 123-4567", "(046) 039-4752", "(172) 970-9006",
]
NEAR_MISSES = ["10°", "5 kW", "3/4/2024", "#12", "@home", "1990s-era"]  # copied, or read by the stated rules
SENTENCES = [
    "It's 10°C outside", "The 1990s saw", "2/3 of cases", "leaves at 06:05", "The 1800s saw",
    "In the 1800s, prices fell.", "It was -5 °F today", "The balance is -3.2 now", "It fell to −12 overnight",
    "Music of the '90s", "She is in her 60s now", "It took 1 1/2 hours", "Add ½ cup", "We close at 23:00",
    "Dated 1999-12-31 by Bo", "Henry VIII was king", "World War II ended", "Read Chapter IV first",
    "Call +44 20 7946 0958 now", "Call +1 (555) 123-4567 now", "A 5 kW heater", "On 3/4/2024 it rained",
    "Item #12 is gone", "A 1990s-era car", "Tom & Jerry met @home", "named data_final_v.csv",
    "She typed :-) and <3", "and 東京 were on the sign", "Keep the % sign out of it.",
]


@pytest.fixture(scope="module")
def readings() -> dict[str, str]:
    """The default bundle's greedy reading of every text, in process on the CPU."""
    runner = Runner(BUNDLE, providers=["CPUExecutionProvider"])
    texts = ALONE + NEAR_MISSES + SENTENCES
    return {t: h[0].text for t, h in zip(texts, runner.translate(texts), strict=True)}


@pytest.mark.parametrize("text", ALONE + NEAR_MISSES + SENTENCES)
def test_reads_as_the_rules_say(readings: dict[str, str], text: str) -> None:
    assert readings[text] == verbalize(text)
