"""Figures and examples the README states, read from it so that a test fails when code and README part."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT

README = REPO_ROOT / "README.md"


def readme_example() -> tuple[str, str]:
    """The README's example translation: (written text, the default model's spoken form)."""
    found = re.search(r"`([^`]+)` ->\s*`([^`]+)`", README.read_text(encoding="utf-8"))
    assert found, "README.md states no example translation (`written` -> `spoken`)"
    return found.group(1), found.group(2)


def readme_sample_exact_match() -> float:
    """The default model's exact match (%) on the held-out sample that bundle.json records, as stated."""
    found = re.search(r"([\d.]+)% on the 500-pair sample", README.read_text(encoding="utf-8"))
    assert found, "README.md states no exact match on the 500-pair sample"
    return float(found.group(1))
