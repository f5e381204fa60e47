"""A kit as parts: one archive split into files of at most a given size, and the manifest that names
each part and each file of the archive with its size and sha256. Standard library only: it runs on the
target before anything is installed."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
ARCHIVE = "gpu-kit.tar"
MIB = 1 << 20
_CHUNK = 4 * MIB
FORMAT = 1


class KitError(RuntimeError):
    """A kit that cannot be used: a missing part, a bad checksum, a file that is not what it says."""


@dataclass(frozen=True)
class Entry:
    """One file: its name (a part's file name, or a path inside the archive), size and sha256."""

    name: str
    bytes: int
    sha256: str


@dataclass
class Manifest:
    """What a kit holds: its parts (in order), the archive they join into, the archive's files, and
    what it was built for (`info`: target Python and platform, versions, the GPU test files)."""

    parts: list[Entry]
    archive: Entry
    files: list[Entry]
    info: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT

    def write(self, kit_dir: Path) -> Path:
        """Write manifest.json into kit_dir."""
        path = kit_dir / MANIFEST
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, kit_dir: Path) -> Manifest:
        """Read kit_dir/manifest.json, or raise KitError saying what is wrong with it."""
        path = kit_dir / MANIFEST
        if not path.is_file():
            raise KitError(f"{path} is missing: copy the kit's {MANIFEST} beside its parts")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("format") != FORMAT:
                raise KitError(f"{path}: kit format {raw.get('format')!r}; this checkout reads {FORMAT}")
            return cls(parts=[Entry(**e) for e in raw["parts"]], archive=Entry(**raw["archive"]),
                       files=[Entry(**e) for e in raw["files"]], info=dict(raw.get("info") or {}))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KitError(f"{path} is not a kit manifest: {exc}") from None


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def entry_of(path: Path, name: str | None = None) -> Entry:
    """The Entry of a file on disk (named `name`, default its file name)."""
    return Entry(name or path.name, path.stat().st_size, sha256_of(path))


def pack(root: Path, archive: Path) -> list[Entry]:
    """Write every file under root into an uncompressed tar (sorted, fixed owner and mode: the same
    files give the same archive); return their entries, paths relative to root."""
    files = sorted(p for p in root.rglob("*") if p.is_file())

    def normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755 if info.mode & 0o100 else 0o644
        return info

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False, filter=normalized)
    return [entry_of(p, p.relative_to(root).as_posix()) for p in files]


def split(archive: Path, out_dir: Path, part_bytes: int) -> list[Entry]:
    """Cut archive into out_dir/<archive name>.partNNN files of at most part_bytes each."""
    if part_bytes < 1:
        raise ValueError(f"part size must be positive, got {part_bytes}")
    parts: list[Entry] = []
    with archive.open("rb") as src:
        while True:
            path = out_dir / f"{archive.name}.part{len(parts):03d}"
            digest, written = hashlib.sha256(), 0
            with path.open("wb") as dst:
                while written < part_bytes and (chunk := src.read(min(_CHUNK, part_bytes - written))):
                    dst.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
            if written == 0 and parts:
                path.unlink()
                return parts
            parts.append(Entry(path.name, written, digest.hexdigest()))
            if written < part_bytes:
                return parts


def check_parts(kit_dir: Path, manifest: Manifest) -> None:
    """Every part present, of its size, with its sha256; KitError naming every part that is not."""
    problems = []
    for part in manifest.parts:
        path = kit_dir / part.name
        if not path.is_file():
            problems.append(f"part {part.name} is missing")
        elif (size := path.stat().st_size) != part.bytes:
            problems.append(f"part {part.name} has {size} bytes, the manifest says {part.bytes}")
        elif sha256_of(path) != part.sha256:
            problems.append(f"part {part.name} has a bad sha256 (damaged in transfer?)")
    if problems:
        raise KitError(f"kit {kit_dir}: {'; '.join(problems)} ({len(manifest.parts)} parts in all, "
                       f"listed in {MANIFEST})")


def join(kit_dir: Path, manifest: Manifest, archive: Path) -> Path:
    """Concatenate the checked parts into archive and check its size and sha256."""
    check_parts(kit_dir, manifest)
    digest = hashlib.sha256()
    with archive.open("wb") as dst:
        for part in manifest.parts:
            with (kit_dir / part.name).open("rb") as src:
                while chunk := src.read(_CHUNK):
                    dst.write(chunk)
                    digest.update(chunk)
    if archive.stat().st_size != manifest.archive.bytes or digest.hexdigest() != manifest.archive.sha256:
        raise KitError(f"the joined parts do not give the archive {manifest.archive.name} of the manifest")
    return archive


def unpack(archive: Path, dest: Path, files: Iterable[Entry]) -> None:
    """Extract archive into dest and check every file against its entry; KitError naming the first bad one."""
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    for entry in files:
        path = dest / entry.name
        if not path.is_file():
            raise KitError(f"file {entry.name} of the manifest is not in the archive")
        if path.stat().st_size != entry.bytes or sha256_of(path) != entry.sha256:
            raise KitError(f"file {entry.name} of the archive does not match its sha256 in the manifest")
