"""Model names and versions as clients send them: checked before they touch the file system."""

from __future__ import annotations

import re
from pathlib import Path

from service.domain.errors import InvalidInput
from service.domain.text import shown

# a name is one path component of printable ASCII letters, digits, '_', '-' and '.', never '.' or '..'
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
VERSION = re.compile(r"[0-9]{1,18}")  # Triton's version folders: a positive integer
RESERVED = frozenset({"stats"})  # names a KServe v2 route takes (GET /v2/models/stats: all statistics)


def check_name(name: str) -> str:
    """name when it is a valid model name (InvalidInput otherwise: separators, '..', absolute paths)."""
    if not NAME.fullmatch(name) or ".." in name:
        raise InvalidInput(f"invalid model name {shown(name)}: use letters, digits, '_', '-' and '.', "
                           "at most 128 characters, no path separators and no '..'")
    if name in RESERVED:
        raise InvalidInput(f"invalid model name {shown(name)}: a KServe v2 route takes it "
                           f"(reserved: {', '.join(sorted(RESERVED))})")
    return name


def check_version(version: str) -> int:
    """The version number of a version string (InvalidInput unless it is a positive integer)."""
    if not VERSION.fullmatch(version) or int(version) < 1:
        raise InvalidInput(f"invalid model version {shown(version)}: versions are positive integers")
    return int(version)


def inside(root: Path, *parts: str) -> Path:
    """root/parts, resolved; InvalidInput unless it lies inside root (symbolic links followed)."""
    base = root.resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and base not in path.parents:
        raise InvalidInput(f"{shown('/'.join(parts))} resolves outside the model repository")
    return path
