"""gpukit/parts.py on stand-in files: pack, split, manifest, join, unpack, and every way a kit can be broken
(a missing, truncated or damaged part, a tampered file, a manifest that is not one)."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

import pytest

from gpukit.parts import (
    ARCHIVE,
    MANIFEST,
    Entry,
    KitError,
    Manifest,
    check_parts,
    entry_of,
    join,
    pack,
    split,
    unpack,
)

PART = 10_000  # bytes per part of the stand-in kits


def stand_in_tree(root: Path) -> dict[str, bytes]:
    """A small tree of random files (one larger than a part, one empty, one executable)."""
    contents = {"wheels/a-1.0-py3-none-any.whl": os.urandom(23_456), "requirements.txt": b"a==1.0\n",
                "protos/x/y_pb2.py": os.urandom(3_000), "fixtures/empty": b"", "bin/tool": os.urandom(100)}
    for name, data in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "bin/tool").chmod(0o755)
    return contents


@pytest.fixture
def kit(tmp_path) -> tuple[Path, Manifest, dict[str, bytes]]:
    """A kit of the stand-in tree in parts of PART bytes: (its folder, manifest, the original files)."""
    src, out = tmp_path / "src", tmp_path / "kit"
    src.mkdir()
    out.mkdir()
    contents = stand_in_tree(src)
    archive = tmp_path / ARCHIVE
    files = pack(src, archive)
    manifest = Manifest(parts=split(archive, out, PART), archive=entry_of(archive), files=files,
                        info={"python": "3.12"})
    manifest.write(out)
    return out, manifest, contents


def test_parts_are_at_most_the_part_size_and_their_manifest_entries_are_their_sha256(kit):
    out, manifest, _ = kit
    written = Manifest.read(out)
    assert written == manifest
    assert len(written.parts) == -(-written.archive.bytes // PART) > 2  # ceil: no empty trailing part
    for part in written.parts:
        data = (out / part.name).read_bytes()
        assert len(data) <= PART and part.bytes == len(data)
        assert part.sha256 == hashlib.sha256(data).hexdigest()
    assert sum(p.bytes for p in written.parts) == written.archive.bytes


def test_the_joined_parts_unpack_into_the_original_files(kit, tmp_path):
    out, manifest, contents = kit
    archive = join(out, manifest, tmp_path / "joined.tar")
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == manifest.archive.sha256
    dest = tmp_path / "unpacked"
    unpack(archive, dest, manifest.files)
    found = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert found == contents
    assert {e.name: e.sha256 for e in manifest.files} == {
        name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    assert os.access(dest / "bin/tool", os.X_OK) and not os.access(dest / "requirements.txt", os.X_OK)


def test_the_same_files_pack_into_the_same_archive(tmp_path):
    for name in ("one", "two"):
        (tmp_path / name / "d").mkdir(parents=True)
        (tmp_path / name / "d" / "f").write_bytes(b"same")
        os.utime(tmp_path / name / "d" / "f", (1000 if name == "one" else 2000,) * 2)
        pack(tmp_path / name, tmp_path / f"{name}.tar")
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()


def test_an_archive_that_divides_evenly_has_no_empty_part(tmp_path):
    archive = tmp_path / ARCHIVE
    archive.write_bytes(os.urandom(3 * 1000))
    (tmp_path / "parts").mkdir()
    parts = split(archive, tmp_path / "parts", 1000)
    assert [p.bytes for p in parts] == [1000, 1000, 1000]
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [p.name for p in parts]


def test_a_missing_part_is_named(kit, tmp_path):
    out, manifest, _ = kit
    (out / manifest.parts[1].name).unlink()
    with pytest.raises(KitError, match=f"part {manifest.parts[1].name} is missing"):
        join(out, manifest, tmp_path / "joined.tar")
    assert not (tmp_path / "joined.tar").exists()


def test_a_damaged_or_truncated_part_is_named(kit):
    out, manifest, _ = kit
    first, last = out / manifest.parts[0].name, out / manifest.parts[-1].name
    data = bytearray(first.read_bytes())
    data[5] ^= 0xFF
    first.write_bytes(bytes(data))
    last.write_bytes(last.read_bytes()[:-1])
    with pytest.raises(KitError) as info:
        check_parts(out, manifest)
    assert f"part {first.name} has a bad sha256" in str(info.value)
    assert f"part {last.name} has {manifest.parts[-1].bytes - 1} bytes" in str(info.value)


def test_a_file_tampered_with_before_packing_is_named_at_unpacking(kit, tmp_path):
    out, manifest, _ = kit
    lying = [Entry(e.name, e.bytes, "0" * 64) if e.name == "requirements.txt" else e for e in manifest.files]
    with pytest.raises(KitError, match="file requirements.txt of the archive does not match"):
        unpack(join(out, manifest, tmp_path / "joined.tar"), tmp_path / "u", lying)


def test_a_file_the_manifest_lists_but_the_archive_lacks_is_named(kit, tmp_path):
    out, manifest, _ = kit
    extra = [*manifest.files, Entry("wheels/b-2.0-py3-none-any.whl", 1, "0" * 64)]
    with pytest.raises(KitError, match="file wheels/b-2.0-py3-none-any.whl of the manifest is not in"):
        unpack(join(out, manifest, tmp_path / "joined.tar"), tmp_path / "u", extra)


def test_an_archive_member_outside_the_destination_is_refused(tmp_path):
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 0
        tar.addfile(info)
    with pytest.raises(tarfile.TarError):
        unpack(archive, tmp_path / "dest", [])
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("text, why", [(None, "is missing"), ("{", "is not a kit manifest"),
                                       ('{"format": 1, "parts": []}', "is not a kit manifest"),
                                       ('{"format": 9}', "kit format 9")])
def test_a_manifest_that_is_missing_or_not_one_is_named(tmp_path, text, why):
    if text is not None:
        (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(KitError, match=why) as info:
        Manifest.read(tmp_path)
    assert str(tmp_path / MANIFEST) in str(info.value)
