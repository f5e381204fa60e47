"""What the kernel says a process holds: /proc/self/smaps_rollup, in MiB (Linux)."""

from __future__ import annotations

FIELDS = {"Rss": "rss", "Pss": "pss", "Anonymous": "anonymous"}  # smaps_rollup field -> our name


def smaps_rollup() -> dict[str, float]:
    """This process's resident (rss), proportional (pss: a page mapped twice counts once) and anonymous
    memory, MiB."""
    with open("/proc/self/smaps_rollup", encoding="ascii") as f:
        rollup = {k: v for k, _, v in (line.partition(":") for line in f)}
    return {name: int(rollup[field].split()[0]) / 1024 for field, name in FIELDS.items()}
