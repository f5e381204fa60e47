"""Load and verify a model bundle directory (docs/bundle-format.md) without PyTorch."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interface.generation import (
    FORMAT_WITH_GENERATION,
    SOURCE_LANGUAGE,
    GenerationSpec,
    LanguageSpec,
    TokenizerSpec,
    parse_generation,
    parse_languages,
    parse_source_language,
    parse_tokenizer,
)
from interface.names import BUNDLE_FILE, BUNDLE_FORMAT_VERSION, DECODER_FILE, ENCODER_FILE, MODEL_NAME
from service.domain.errors import BundleError

SUPPORTED_FORMAT_VERSIONS = (BUNDLE_FORMAT_VERSION, FORMAT_WITH_GENERATION)
REQUIRED_FILES = (ENCODER_FILE, DECODER_FILE)  # and the tokenizer's files
REQUIRED_MODEL_KEYS = ("vocab_size", "d_model", "n_heads", "n_decoder_layers", "max_len")


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the special tokens."""

    pad: int
    bos: int
    eos: int
    unk: int


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its manifest, model config, special ids and file paths."""

    path: Path
    manifest: dict[str, Any]
    config: dict[str, Any]
    special: SpecialIds
    name: str
    version: str
    format_version: int
    encoder_path: Path
    decoder_path: Path
    tokenizer: TokenizerSpec = field(default_factory=TokenizerSpec)  # format 1: tokenizer.json
    generation: GenerationSpec = field(default_factory=GenerationSpec)  # format 1: bos, [eos], no rules
    languages: LanguageSpec = field(default_factory=LanguageSpec)  # format 1: none
    source_language: str | None = None  # the language the model reads (any format; None: not stated)
    variants: dict[str, dict[str, Path]] = field(default_factory=dict)
    provider_variants: dict[str, str] = field(default_factory=dict)  # provider -> its variant
    host_nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file -> integer-only nodes

    def files(self, variant: str | None) -> dict[str, Path]:
        """{"encoder": path, "decoder": path} of a variant (None: the base files): the graphs the runtime
        opens. Other graph files a bundle lists (older exports' multi-step decoders) are never opened."""
        if variant is None:
            return {"encoder": self.encoder_path, "decoder": self.decoder_path}
        if variant not in self.variants:
            raise BundleError(f"bundle {self.path} has no variant {variant!r} (has: {sorted(self.variants)})")
        return dict(self.variants[variant])

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer's file (kind tokenizers) or its vocabulary (kind sentencepiece)."""
        spec = self.tokenizer
        return self.path / (spec.file if spec.kind == "tokenizers" else spec.vocab)

    def variant_for(self, provider: str) -> str | None:
        """The variant bundle.json names for `provider` (None: the base files)."""
        return self.provider_variants.get(provider)

    @property
    def max_len(self) -> int:
        """Longest source or target sequence, in tokens (incl. bos/eos)."""
        return int(self.config["max_len"])

    @property
    def n_decoder_layers(self) -> int:
        """Number of decoder layers (= number of self/cross KV cache pairs)."""
        return int(self.config["n_decoder_layers"])


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_manifest(root: Path) -> dict[str, Any]:
    """Parse bundle.json, or raise BundleError saying what is wrong with it."""
    if not root.is_dir():
        raise BundleError(f"bundle directory not found: {root}")
    manifest_file = root / BUNDLE_FILE
    if not manifest_file.is_file():
        raise BundleError(f"{BUNDLE_FILE} not found in bundle {root}")
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{BUNDLE_FILE} of bundle {root} is not valid JSON: {e}") from e
    if not isinstance(manifest, dict):
        raise BundleError(f"{BUNDLE_FILE} of bundle {root} must be a JSON object")
    found = manifest.get("format_version")
    if found not in SUPPORTED_FORMAT_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_FORMAT_VERSIONS)
        raise BundleError(
            f"bundle {root} has format_version {found!r}; this runtime supports format_version {supported}"
        )
    for key in ("model", "files"):
        if not isinstance(manifest.get(key), dict):
            raise BundleError(f"{BUNDLE_FILE} of bundle {root} has no '{key}' object")
    missing = [k for k in REQUIRED_MODEL_KEYS if k not in manifest["model"]]
    if missing:
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: 'model' lacks {', '.join(missing)}")
    return manifest


def _verify_file(root: Path, name: str, entry: Any, check_hash: bool) -> None:
    """Check one listed file: present, of the recorded size, with the recorded sha256."""
    if not isinstance(entry, dict) or "sha256" not in entry or "bytes" not in entry:
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: entry of file {name} needs 'sha256' and 'bytes'")
    path = root / name
    if not path.is_file():
        raise BundleError(f"bundle file {name} is missing from {root}")
    size = path.stat().st_size
    if size != entry["bytes"]:
        kind = "truncated" if size < entry["bytes"] else "size mismatch"
        raise BundleError(
            f"bundle file {name} is {kind}: {size} bytes, expected {entry['bytes']} (bundle {root})"
        )
    if check_hash and file_sha256(path) != entry["sha256"]:
        raise BundleError(f"bundle file {name} is corrupt: sha256 mismatch (bundle {root})")


def _special_ids(manifest: dict[str, Any]) -> SpecialIds:
    """Special token ids from `special_tokens`, falling back to the model config."""
    tokens, model = manifest.get("special_tokens") or {}, manifest["model"]
    defaults = {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
    return SpecialIds(**{k: int(tokens.get(k, model.get(f"{k}_id", v))) for k, v in defaults.items()})


def _generation_objects(root: Path,
                        manifest: dict[str, Any]) -> tuple[TokenizerSpec, GenerationSpec, LanguageSpec]:
    """The tokenizer, generation and languages objects (format 2; format 1 has the defaults), their
    token ids checked against the model's vocabulary."""
    if manifest["format_version"] < FORMAT_WITH_GENERATION:
        return TokenizerSpec(), GenerationSpec(), LanguageSpec()
    try:
        tokenizer = parse_tokenizer(manifest.get("tokenizer"))
        generation = parse_generation(manifest.get("generation"))
        languages = parse_languages(manifest.get("languages"))
    except ValueError as e:
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: {e}") from None
    model = manifest["model"]
    target = int(model["vocab_size"])
    source = int(model.get("source_vocab_size") or target)  # a separate source vocabulary's size
    used = [n for n, where in ((source, languages.source_prefix), (target, languages.forced_target)) if where]
    ids = {"generation.decoder_start_id": ([generation.decoder_start_id], target),
           "generation.forced_bos_id": ([generation.forced_bos_id], target),
           "generation.source_suffix": (list(generation.source_suffix or ()), source),
           "generation.source_prefix": (list(generation.source_prefix), source),
           **{f"generation.tasks.{name}": (list(ids), source) for name, ids in generation.tasks.items()},
           "generation.suppress_ids": (list(generation.suppress_ids), target),
           "generation.begin_suppress_ids": (list(generation.begin_suppress_ids), target),
           "languages.codes": (list(languages.codes.values()), min(used, default=target))}
    for key, (values, vocab) in ids.items():
        bad = [i for i in values if i is not None and not 0 <= i < vocab]
        if bad:
            raise BundleError(f"{BUNDLE_FILE} of bundle {root}: '{key}' holds id {bad[0]}, outside the "
                              f"model's vocabulary of {vocab}")
    if _special_ids(manifest).eos in generation.suppress_ids:
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: 'generation.suppress_ids' holds the eos id: "
                          "the model could never stop")
    return tokenizer, generation, languages


def _source_language(root: Path, manifest: dict[str, Any]) -> str | None:
    """The optional top-level `source_language` (any format_version); BundleError naming the key."""
    try:
        return parse_source_language(manifest.get(SOURCE_LANGUAGE))
    except ValueError as e:
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: {e}") from None


def _check_weights(root: Path, manifest: dict[str, Any]) -> None:
    """The `weights` object (data file -> the graph files reading it) names only listed, hence verified,
    files: ONNX Runtime would otherwise meet a missing or corrupt data file only at session creation."""
    weights = manifest.get("weights") or {}
    if not isinstance(weights, dict) or not all(isinstance(v, list) for v in weights.values()):
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: 'weights' must map data files to graph files")
    for data_file, graphs in weights.items():
        for name in (data_file, *graphs):
            if name not in manifest["files"]:
                raise BundleError(f"weights file {data_file}: {name} is not listed in {BUNDLE_FILE} "
                                  f"of bundle {root}")


def load_bundle(path: str | Path, check_hashes: bool = True) -> Bundle:
    """Read bundle.json, verify every listed file (size and sha256) and return the Bundle."""
    root = Path(path)
    manifest = _read_manifest(root)
    files = manifest["files"]
    tokenizer, generation, languages = _generation_objects(root, manifest)
    source_language = _source_language(root, manifest)
    for name in (*REQUIRED_FILES, *tokenizer.files()):
        if name not in files:
            raise BundleError(f"{BUNDLE_FILE} of bundle {root} does not list required file {name}")
    for name, entry in files.items():
        _verify_file(root, name, entry, check_hashes)
    variants = {
        kind: {part: root / file for part, file in parts.items()}
        for kind, parts in (manifest.get("variants") or {}).items()
    }
    for kind, parts in variants.items():
        for file in parts.values():
            if file.name not in files:
                raise BundleError(f"variant {kind} file {file.name} is not listed in {BUNDLE_FILE} of {root}")
    provider_variants = manifest.get("provider_variants") or {}
    if not isinstance(provider_variants, dict) or any(v not in variants for v in provider_variants.values()):
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: 'provider_variants' must map providers to "
                          f"variants it lists (has: {sorted(variants)})")
    _check_weights(root, manifest)
    host_nodes = manifest.get("host_nodes") or {}
    if not isinstance(host_nodes, dict) or not all(isinstance(v, list) for v in host_nodes.values()):
        raise BundleError(f"{BUNDLE_FILE} of bundle {root}: 'host_nodes' must map file names to node names")
    return Bundle(
        path=root,
        manifest=manifest,
        config=dict(manifest["model"]),
        special=_special_ids(manifest),
        name=str(manifest.get("name", MODEL_NAME)),
        version=str(manifest.get("version", "unknown")),
        format_version=int(manifest["format_version"]),
        encoder_path=root / ENCODER_FILE,
        decoder_path=root / DECODER_FILE,
        tokenizer=tokenizer,
        generation=generation,
        languages=languages,
        source_language=source_language,
        variants=variants,
        provider_variants={str(k): str(v) for k, v in provider_variants.items()},
        host_nodes={str(k): tuple(str(n) for n in v) for k, v in host_nodes.items()},
    )
