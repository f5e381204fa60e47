"""Model repositories for tests: Triton's layout DIR/<model>/<version>/, each version a link to a bundle."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def link_repository(root: Path, bundle: Path, versions: Iterable[tuple[str, int]],
                    settings: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """root/<name>/<version> -> bundle for each (name, version), and each model's model.json from
    `settings` ({name: settings}); root."""
    for name, version in versions:
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / str(version)).symlink_to(bundle, target_is_directory=True)
    for name, values in (settings or {}).items():
        (root / name / "model.json").write_text(json.dumps(dict(values)))
    return root
