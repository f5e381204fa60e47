"""The repository on disk, in Triton's layout: DIR/<model>/<version>/ is a bundle directory.

    DIR/
      opus-en-de/
        model.json        optional settings of the model (below)
        1/  bundle.json, encoder.onnx, ...
        2/  ...
      default/
        1/  ...

A version is a folder named by a positive integer holding a `bundle.json`; other entries are ignored. The
settings file (`SETTINGS_FILE`, JSON) may set, for this model, what the server's flags set for all: `batching`
(none | dynamic | continuous), `max_batch_size`, `max_batch_tokens`, `queue_size`, `max_queue_delay_ms`,
`variant`, and `version_policy` as Triton's ModelVersionPolicy: `{"latest": {"num_versions": N}}` (the
default, N = 1), `{"all": {}}` or `{"specific": {"versions": [1, 3]}}`. `--bundle DIR` is a repository of one
model, `MODEL_NAME`, version 1. The server's flags are ceilings (`Ceilings`): a model's settings, as a load's
`config` over its settings file, may lower `max_batch_size`, `max_batch_tokens`, `queue_size` and
`max_queue_delay_ms`, never raise one above the server's flag.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from interface.names import BUNDLE_FILE
from service.domain.errors import InvalidInput, UnknownModel
from service.domain.glossary import MAX_MODEL_TERMS, Glossary
from service.domain.tasks import MAX_TASK_CHARS
from service.domain.text import shown
from service.models.naming import NAME, RESERVED, VERSION, check_name, inside

SETTINGS_FILE = "model.json"
GLOSSARY_FILE = "glossary.tsv"  # the model's glossary: `source term<TAB>target term` lines (read_glossary)
MAX_GLOSSARY_BYTES = 16 << 20
LOAD_ORIGIN = "load parameter 'config'"  # where a load's settings come from, as its errors name it
BATCHING_MODES = ("none", "dynamic", "continuous")
LIMITS = ("max_batch_size", "max_batch_tokens", "queue_size", "max_queue_delay_ms")  # the flags' ceilings
MAX_DEPTH = 8  # deepest nesting of a settings object (version_policy needs 4)


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions of a model are served (Triton's ModelVersionPolicy)."""

    kind: str = "latest"  # latest | all | specific
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    @classmethod
    def from_json(cls, value: Any) -> VersionPolicy:
        """The policy of a settings file's `version_policy` (InvalidInput when malformed)."""
        if not isinstance(value, dict) or len(value) != 1:
            raise InvalidInput("version_policy must be one of latest / all / specific, "
                               f"got {shown(str(value))}")
        ((kind, body),) = value.items()
        body = body or {}
        latest = body.get("num_versions", 1)
        if kind == "latest" and isinstance(latest, int) and not isinstance(latest, bool) and latest >= 1:
            return cls("latest", num_versions=latest)
        if kind == "all":
            return cls("all")
        versions = body.get("versions") if kind == "specific" else None
        if isinstance(versions, list) and versions and all(isinstance(v, int) and v >= 1 for v in versions):
            return cls("specific", versions=tuple(sorted(set(versions))))
        raise InvalidInput(f"invalid version_policy {shown(json.dumps(value))}")

    def select(self, available: list[int]) -> list[int]:
        """The served versions among `available`, ascending."""
        ordered = sorted(available)
        if self.kind == "all":
            return ordered
        if self.kind == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered[-self.num_versions:]


@dataclass(frozen=True)
class ModelSettings:
    """A model's own settings; None leaves the server's flag in force."""

    batching: str | None = None
    max_batch_size: int | None = None
    max_batch_tokens: int | None = None
    queue_size: int | None = None
    max_queue_delay_ms: float | None = None
    variant: str | None = None
    version_policy: VersionPolicy | None = None
    glossary: Glossary | None = None  # from the model's GLOSSARY_FILE, never from JSON
    task: str | None = None  # the default task over the bundle's (service/domain/tasks.py; "none": no prefix)

    @property
    def policy(self) -> VersionPolicy:
        """The version policy in force (Triton's default: the latest version)."""
        return self.version_policy or VersionPolicy()

    @classmethod
    def parse(cls, text: str, origin: str = SETTINGS_FILE) -> ModelSettings:
        """Settings from JSON text (InvalidInput naming `origin` for text that is not JSON, nests deeper
        than MAX_DEPTH, or holds unknown keys or bad values)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InvalidInput(f"{origin}: not readable JSON: {exc}") from None
        if depth(data) > MAX_DEPTH:
            raise InvalidInput(f"{origin}: settings nest deeper than {MAX_DEPTH} levels")
        return cls.from_json(data, origin)

    @classmethod
    def from_json(cls, data: Any, origin: str = SETTINGS_FILE) -> ModelSettings:
        """Settings from a JSON object (InvalidInput naming `origin` for unknown keys or bad values)."""
        if not isinstance(data, dict):
            raise InvalidInput(f"{origin}: settings must be a JSON object")
        known = {f.name for f in fields(cls)} - {"glossary"}
        if unknown := sorted(set(data) - known):
            raise InvalidInput(f"{origin}: unknown settings {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key == "version_policy":
                values[key] = VersionPolicy.from_json(value)
            elif key == "batching":
                if value not in BATCHING_MODES:
                    raise InvalidInput(f"{origin}: batching must be one of {list(BATCHING_MODES)}")
                values[key] = value
            elif key == "task":
                if not isinstance(value, str) or not value.strip() or len(value) > MAX_TASK_CHARS:
                    raise InvalidInput(f"{origin}: task must be a task name of the bundle's (or \"none\")")
                values[key] = value
            elif key == "variant":
                if not isinstance(value, str) or not NAME.fullmatch(value):
                    raise InvalidInput(f"{origin}: variant must be a variant name")
                values[key] = value
            else:
                values[key] = setting_number(key, value, origin)
        return cls(**values)

    def over(self, base: ModelSettings) -> ModelSettings:
        """These settings where set, base's elsewhere (a load's `config` over the settings file)."""
        return replace(base, **{f.name: getattr(self, f.name) for f in fields(self)
                                if getattr(self, f.name) is not None})


def setting_number(key: str, value: Any, origin: str) -> int | float:
    """A numeric setting's value: a delay any finite number >= 0, a count a whole number >= 1 (InvalidInput
    naming `origin` and the key otherwise: a bool, a string, NaN, an infinity, a fraction)."""
    delay = "delay" in key
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if number and isinstance(value, float):
        number = math.isfinite(value) and (delay or value.is_integer())
    if not number or value < (0 if delay else 1):
        want = "a finite number >= 0" if delay else "a whole number >= 1"
        raise InvalidInput(f"{origin}: {key} must be {want}, got {shown(value)}")
    return value if delay else int(value)


def depth(value: Any) -> int:
    """How deeply a JSON value nests (a scalar: 0), counted without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level + 1)
            todo += [(child, level + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


@dataclass(frozen=True)
class Ceilings:
    """The server's limits (its flags) that a model's settings may lower, never raise; None: no ceiling."""

    max_batch_size: int | None = None
    max_batch_tokens: int | None = None
    queue_size: int | None = None
    max_queue_delay_ms: float | None = None

    def bound(self, entry: ModelEntry, settings: ModelSettings | None = None) -> ModelSettings:
        """The settings a load of `entry` runs with, `settings` (its config) over the model's own;
        InvalidInput naming the setting, its value, where it was set and the server's flag when one
        exceeds the server's limit."""
        merged = settings.over(entry.settings) if settings is not None else entry.settings
        for key in LIMITS:
            value, most = getattr(merged, key), getattr(self, key)
            if value is not None and most is not None and value > most:
                origin = LOAD_ORIGIN if settings is not None and getattr(settings, key) is not None \
                    else f"{entry.name}/{SETTINGS_FILE}"
                raise InvalidInput(f"{origin}: {key} {value} exceeds this server's --{key.replace('_', '-')} "
                                   f"{most}")
        return merged


@dataclass(frozen=True)
class ModelEntry:
    """A model of the repository: its folder, the versions on disk and its settings."""

    name: str
    versions: dict[int, Path]  # every version folder with a bundle.json
    settings: ModelSettings

    def served(self) -> list[int]:
        """The versions its policy serves."""
        return self.settings.policy.select(list(self.versions))


class RepositoryLayout:
    """Reads the repository folder (or one bundle) on every call: what a load sees is what is on disk."""

    def __init__(self, root: Path | None = None, bundle: Path | None = None, bundle_name: str = "") -> None:
        """A repository folder `root`, or a single `bundle` served as model `bundle_name`, version 1."""
        if (root is None) == (bundle is None):
            raise ValueError("give a repository folder or a bundle, not both")
        self.root, self.bundle, self.bundle_name = root, bundle, bundle_name

    def names(self) -> list[str]:
        """The models of the repository, sorted."""
        if self.bundle is not None:
            return [self.bundle_name]
        assert self.root is not None
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and NAME.fullmatch(p.name)
                      and ".." not in p.name and p.name not in RESERVED)

    def has(self, name: str) -> bool:
        """Whether `name` is a model of the repository (a folder of it now; one stat, never raises)."""
        if self.bundle is not None:
            return name == self.bundle_name
        assert self.root is not None
        return bool(NAME.fullmatch(name)) and ".." not in name and (self.root / name).is_dir()

    def entry(self, name: str) -> ModelEntry:
        """The model `name` as it is on disk now (UnknownModel when absent, InvalidInput when invalid)."""
        check_name(name)
        if self.bundle is not None:
            if name != self.bundle_name:
                raise UnknownModel(f"unknown model {shown(name)}; this server has {[self.bundle_name]}")
            return ModelEntry(name, {1: self.bundle}, ModelSettings())
        assert self.root is not None
        folder = inside(self.root, name)
        if not folder.is_dir():
            raise UnknownModel(f"unknown model {shown(name)}; the repository has {self.names()}")
        versions = {int(p.name): p for p in folder.iterdir()  # "01" and "²" are no versions: one name each
                    if p.is_dir() and VERSION.fullmatch(p.name) and p.name == str(int(p.name)) != "0"
                    and (p / BUNDLE_FILE).is_file()}
        settings_file = folder / SETTINGS_FILE
        settings = ModelSettings()
        if settings_file.is_file():
            try:
                text = settings_file.read_text(encoding="utf-8")
            except (OSError, ValueError) as exc:
                raise InvalidInput(f"{name}/{SETTINGS_FILE}: not readable JSON: {exc}") from exc
            settings = ModelSettings.parse(text, f"{name}/{SETTINGS_FILE}")
        if (folder / GLOSSARY_FILE).is_file():
            glossary = read_glossary(folder / GLOSSARY_FILE, f"{name}/{GLOSSARY_FILE}")
            settings = replace(settings, glossary=glossary)
        return ModelEntry(name, versions, settings)


def read_glossary(path: Path, origin: str) -> Glossary:
    """A glossary file: UTF-8, one `source term<TAB>target term` per line, blank lines and lines starting
    with "#" skipped, several lines of one source term its alternatives; InvalidInput naming `origin` and
    the line for anything else (service/domain/glossary.py states the limits)."""
    try:
        if path.stat().st_size > MAX_GLOSSARY_BYTES:
            raise InvalidInput(f"{origin}: over {MAX_GLOSSARY_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{origin}: not readable UTF-8 text: {exc}") from None
    entries = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise InvalidInput(f"{origin}, line {n}: {len(parts) - 1} tabs (one separates source and target "
                               f"terms): {shown(line)}")
        entries.append((f"{origin}, line {n}", parts[0], parts[1]))
    return Glossary.from_entries(entries, origin, MAX_MODEL_TERMS)
