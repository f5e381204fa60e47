"""Figures and examples the README and docs state, read from them so that a test fails when code and
documentation part."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT

README = REPO_ROOT / "README.md"
MODEL_DOC = REPO_ROOT / "docs" / "model.md"


def readme_example() -> tuple[str, str]:
    """The README's example translation: (written text, the default model's spoken form)."""
    found = re.search(r"`([^`]+)` ->\s*`([^`]+)`", README.read_text(encoding="utf-8"))
    assert found, "README.md states no example translation (`written` -> `spoken`)"
    return found.group(1), found.group(2)


def documented_sample_exact_match() -> float:
    """The default model's exact match (%) on the 500-pair held-out sample that bundle.json records, as
    README.md and docs/model.md state it (each file that states it must say the same)."""
    stated = {}
    for doc in (README, MODEL_DOC):
        if doc.exists():
            found = re.findall(r"([\d.]+)% on the 500-pair sample", doc.read_text(encoding="utf-8"))
            stated |= {f"{doc.relative_to(REPO_ROOT)}: {value}": float(value) for value in found}
    assert stated, "neither README.md nor docs/model.md states the exact match on the 500-pair sample"
    assert len(set(stated.values())) == 1, f"the docs disagree: {sorted(stated)}"
    return next(iter(stated.values()))
