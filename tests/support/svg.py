"""What an SVG chart holds (its element ids and texts, parsed as XML); whether a point is in an axes' view."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SVG = "{http://www.w3.org/2000/svg}"


@dataclass
class Chart:
    """An SVG file's ids (matplotlib writes an artist's gid as its group's id) and texts."""

    ids: set[str]
    texts: list[str]

    def has_text(self, fragment: str) -> bool:
        """Whether some text element contains fragment."""
        return any(fragment in t for t in self.texts)


def read_svg(path: Path) -> Chart:
    """Parse an SVG (fails on malformed XML or another root) into its ids and texts."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg", root.tag
    ids = {el.get("id") for el in root.iter() if el.get("id")}
    texts = ["".join(el.itertext()).strip() for el in root.iter(f"{SVG}text")]
    return Chart(ids, [t for t in texts if t])


def in_view(ax: Any, x: float, y: float) -> bool:
    """Whether the data point (x, y) lies within the axes' limits (drawn, not clipped)."""
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    return x0 <= x <= x1 and y0 <= y <= y1
