"""A model's files as a skeleton: every byte but its random weight matrices, regenerated with numpy alone.

The GPU host has no torch and takes transfers of at most 64 MiB, so the opus-mt-shaped model (a bundle of
about 300 MB and CTranslate2's model of the same weights) travels as its skeleton (gpukit/skeleton_build.py
makes it): each file's bytes outside its holes (`carried.bin`), and per hole how to fill it
(`skeleton.json`). `materialize` rebuilds the files with numpy only:

- "random": a weight matrix, N(mean, std) float32 drawn by numpy's PCG64 from (seed, key), the rows that
  were all zero left zero (the decoder's start row of a Marian embedding);
- "fp16": another hole's array cast to float16 as the fp16 variant's converter casts (its weights);
- "pieces": rows taken from holes' arrays, each optionally transposed and scaled, concatenated (a
  CTranslate2 variable: its fused Q/K/V, its vocabulary without the pad row).

The drawn values depend only on the seed and numpy's generator (numpy is pinned), so every file's sha256 is
known when the skeleton is made and checked after materializing; a file whose sha256 differs is an error.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

SKELETON = "skeleton.json"
CARRIED = "carried.bin"
STAMP = ".materialized"  # in the output folder: the sha256 of the skeleton.json it was made from
FP16_MIN_POSITIVE, FP16_MAX = 5.96e-08, 65504.0  # onnxruntime.transformers.float16's defaults


class SkeletonError(RuntimeError):
    """A skeleton that cannot be materialized, or files that do not match it."""


def draw(seed: int, key: int, shape: list[int], mean: float, std: float, zero_rows: list[int]) -> np.ndarray:
    """The float32 array of a "random" hole: deterministic in (seed, key) for a given numpy."""
    rng = np.random.Generator(np.random.PCG64([seed, key]))
    array = rng.standard_normal(tuple(shape), dtype=np.float32)
    array *= np.float32(std)
    array += np.float32(mean)
    if zero_rows:
        array[np.asarray(zero_rows, np.int64)] = 0.0
    return array


def fp16_cast(array: np.ndarray) -> np.ndarray:
    """float32 -> float16 as the fp16 variant's converter does it (onnxruntime.transformers.float16
    `convert_np_to_float16`): magnitudes in (0, 5.96e-08) raised to it, past 65504 lowered to it."""
    tiny, huge = np.float32(FP16_MIN_POSITIVE), np.float32(FP16_MAX)
    out = np.where((array > 0) & (array < tiny), tiny, array)
    out = np.where((array < 0) & (array > -tiny), -tiny, out)
    return np.clip(out, -huge, huge).astype(np.float16)


def pieces_array(pieces: list[list[Any]], arrays: dict[int, np.ndarray]) -> np.ndarray:
    """Concatenate rows [start, stop) of each piece's array (transposed first when asked), scaled."""
    parts = []
    for key, transpose, start, stop, scale in pieces:
        source = arrays[key].T if transpose else arrays[key]
        rows = source[start:stop]
        parts.append(rows * np.float32(scale) if scale != 1.0 else rows)
    return np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=np.float32)


class Arrays:
    """The arrays of a skeleton's holes, each computed once: random ones drawn, the others derived."""

    def __init__(self, seed: int, fills: dict[int, dict[str, Any]]) -> None:
        self.seed, self.fills, self.cache = seed, fills, {}

    def __getitem__(self, key: int) -> np.ndarray:
        """The array of hole `key`."""
        if key not in self.cache:
            fill = self.fills[key]
            kind = fill["kind"]
            if kind == "random":
                array = draw(self.seed, key, fill["shape"], fill["mean"], fill["std"], fill["zero_rows"])
            elif kind == "fp16":
                array = fp16_cast(self[fill["of"]])
            elif kind == "pieces":
                array = pieces_array(fill["pieces"], {p[0]: self[p[0]] for p in fill["pieces"]})
            else:
                raise SkeletonError(f"unknown fill kind {kind!r}")
            self.cache[key] = array
        return self.cache[key]


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_file(dest: Path, entry: dict[str, Any], carried: memoryview, arrays: Arrays) -> None:
    """One file: its carried bytes between its holes, each hole filled with its array's bytes."""
    out = bytearray(entry["bytes"])
    position, source = 0, entry["carried_offset"]
    for offset, length, key in [*entry["holes"], [entry["bytes"], 0, None]]:
        gap = offset - position
        out[position:offset] = carried[source:source + gap]
        source += gap
        if key is not None:
            data = arrays[key].tobytes()
            if len(data) != length:
                raise SkeletonError(f"{entry['name']}: hole at {offset} holds {length} bytes, its array "
                                    f"{len(data)}")
            out[offset:offset + length] = data
        position = offset + length
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(out)


def materialize(skeleton: Path, out: Path, log=print) -> Path:
    """Write the skeleton's files under out (folders as recorded, e.g. bundle/ and ct2/), check every
    sha256, and return out. A folder already materialized from the same skeleton is reused."""
    manifest_bytes = (skeleton / SKELETON).read_bytes()
    stamp = hashlib.sha256(manifest_bytes).hexdigest()
    if (out / STAMP).is_file() and (out / STAMP).read_text().strip() == stamp:
        return out
    manifest = json.loads(manifest_bytes)
    carried = memoryview((skeleton / CARRIED).read_bytes())
    arrays = Arrays(int(manifest["seed"]), {int(k): v for k, v in manifest["fills"].items()})
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP).unlink(missing_ok=True)
    for entry in manifest["files"]:
        dest = out / entry["name"]
        write_file(dest, entry, carried, arrays)
        if file_sha256(dest) != entry["sha256"]:
            raise SkeletonError(f"{entry['name']}: sha256 after materializing differs from the skeleton's "
                                "(another numpy than the one the skeleton was made with?)")
    (out / STAMP).write_text(stamp + "\n")
    log(f"skeleton: {len(manifest['files'])} files materialized in {out} "
        f"({sum(e['bytes'] for e in manifest['files']) / 2**20:.1f} MiB)")
    return out


def info(skeleton: Path) -> dict[str, Any]:
    """The skeleton's description: shape, seed, the build's record, step bytes, the texts file."""
    return json.loads((skeleton / SKELETON).read_text(encoding="utf-8"))["info"]
