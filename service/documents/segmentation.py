"""Sentence spans of a text, and a sentence too long for a model cut into pieces that fit.

Roles: the document translator asks `sentences` for the sentences of each paragraph and `split_long` for any
sentence the model cannot take whole; it translates the spans and keeps everything around them (spacing,
line breaks) byte for byte.

Contract of both: a span is (start, end), Python str indices into the text given. Spans are in order, do not
overlap, and never begin or end with whitespace (str.isspace); what lies between two spans, before the first
and after the last is whitespace only. So the spans and the gaps between them, joined, are the text again.

Rules (docs/documents.md, "Sentence segmentation"):
- sentencex (Wikimedia, Rust) places the boundaries by the rules of the language, which `language_code`
  normalises; a language sentencex has no rules for follows its fallback chain, and English at its end.
- A blank line (two line breaks with only other whitespace between) always ends a sentence. A single line
  break never does by itself: within a paragraph it counts as a space (text wrapped at a fixed width).
- Lone surrogates, which no UTF-8 text holds, are segmented as U+FFFD.

Thread safety: sentencex's functions keep no state (its module declares itself safe without the GIL) and
`language_code`'s cache is an lru_cache, so any thread may call these. sentencex holds the GIL while it runs.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from functools import lru_cache

import sentencex

DEFAULT_LANGUAGE = "en"  # for None, "" or a malformed code; sentencex's own fallback for a code it lacks
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # as str.splitlines breaks lines
_BREAK = r"(?:\r\n|\r(?!\n)|[\n\v\f\x1c\x1d\x1e\x85\u2028\u2029])"  # one line break; \r\n counts once
_SPACE = r"[^\S\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]"  # whitespace other than a line break
_BLANK_LINE = re.compile(f"{_BREAK}(?:{_SPACE}*{_BREAK})+")  # a line break, then blank lines
_LINE_BREAK = re.compile(r"[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TWO_LETTERS = re.compile(r"[^\W\d_].*?[^\W\d_]", re.S)  # what a fragment lacks
CLAUSE_MARKS = ",;:\u2014\u2013\u060c\u061b"  # , ; : em dash, en dash, Arabic comma, semicolon; + whitespace
WIDE_CLAUSE_MARKS = "\uff0c\u3001\uff1b\uff1a"  # full-width , 、 ; : (Chinese, Japanese): no whitespace after
ZWJ = "\u200d"

# ISO 639-3 (and NLLB's "xxx_Script") codes of the NLLB-200 languages that have an ISO 639-1 code; NLLB's
# individual languages map to their macrolanguage's code (arb, ary... -> ar; pes, prs -> fa; zsm -> ms).
# A 3-letter code not listed stays as it is: sentencex knows many (ast -> es, bar -> de through fallbacks).
_ISO639_3_TO_1 = """
acm:ar acq:ar aeb:ar ajp:ar apc:ar arb:ar ara:ar ars:ar ary:ar arz:ar afr:af aka:ak amh:am asm:as ayr:ay
aym:ay azj:az aze:az bak:ba bam:bm bel:be ben:bn bod:bo tib:bo bos:bs bul:bg cat:ca ces:cs cze:cs cym:cy
wel:cy dan:da deu:de ger:de dzo:dz ell:el gre:el eng:en epo:eo est:et ekk:et eus:eu baq:eu ewe:ee fao:fo
fas:fa per:fa pes:fa prs:fa fij:fj fin:fi fra:fr fre:fr fuv:ff ful:ff gla:gd gle:ga glg:gl grn:gn guj:gu
hat:ht hau:ha heb:he hin:hi hrv:hr hun:hu hye:hy arm:hy ibo:ig ind:id isl:is ice:is ita:it jav:jv jpn:ja
kan:kn kas:ks kat:ka geo:ka knc:kr kau:kr kaz:kk khm:km kik:ki kin:rw kir:ky kon:kg kor:ko kmr:ku kur:ku
lao:lo lvs:lv lav:lv lim:li lin:ln lit:lt ltz:lb lug:lg mal:ml mar:mr mkd:mk mac:mk plt:mg mlg:mg mlt:mt
khk:mn mon:mn mri:mi mao:mi zsm:ms msa:ms may:ms mya:my bur:my nld:nl dut:nl nno:nn nob:nb nor:no npi:ne
nep:ne nya:ny oci:oc gaz:om orm:om ory:or ori:or pan:pa pol:pl por:pt pbt:ps pus:ps quy:qu que:qu ron:ro
rum:ro run:rn rus:ru sag:sg san:sa sin:si slk:sk slo:sk slv:sl smo:sm sna:sn snd:sd som:so sot:st spa:es
als:sq sqi:sq alb:sq srd:sc srp:sr ssw:ss sun:su swe:sv swh:sw swa:sw tam:ta tat:tt tel:te tgk:tg tgl:tl
tha:th tir:ti tsn:tn tso:ts tuk:tk tur:tr twi:tw uig:ug ukr:uk urd:ur uzn:uz uzb:uz vie:vi wol:wo xho:xh
ydd:yi yid:yi yor:yo zho:zh chi:zh zul:zu
"""
_TO_639_1 = dict(pair.split(":") for pair in _ISO639_3_TO_1.split())


@lru_cache(maxsize=1024)
def language_code(language: str | None) -> str:
    """The code sentencex is given for a request's language: ISO 639-1 ("de") from "de", "de-AT", "pt_BR",
    "deu", "deu_Latn" (NLLB) or ">>deu<<" (Marian); a 3-letter code with no 639-1 one as it is;
    DEFAULT_LANGUAGE for None, "" or anything else."""
    if not isinstance(language, str):
        return DEFAULT_LANGUAGE
    primary = re.split(r"[-_]", language.strip().strip("<>").lower(), maxsplit=1)[0]
    if not re.fullmatch(r"[a-z]{2,3}", primary):
        return DEFAULT_LANGUAGE
    return _TO_639_1.get(primary, primary)


def sentences(text: str, language: str | None = None) -> list[tuple[int, int]]:
    """Spans of the sentences of `text` in `language` (any form `language_code` takes); see the module's
    contract and rules. Empty or whitespace-only text has none."""
    code = language_code(language)
    spans: list[tuple[int, int]] = []
    start = 0
    for blank in _BLANK_LINE.finditer(text):
        spans += _paragraph(text, start, blank.start(), code)
        start = blank.end()
    spans += _paragraph(text, start, len(text), code)
    return spans


def _paragraph(text: str, start: int, end: int, code: str) -> list[tuple[int, int]]:
    """The sentence spans of text[start:end], a paragraph: its line breaks read as spaces."""
    flat = _LINE_BREAK.sub(" ", text[start:end])  # one space per break: offsets hold
    if not flat or flat.isspace():
        return []
    try:
        parts = sentencex.segment(code, flat)
    except UnicodeEncodeError:  # lone surrogates: one U+FFFD each, offsets hold
        flat = _SURROGATE.sub("\ufffd", flat)
        parts = sentencex.segment(code, flat)
    spans = []
    at = start
    for cut in _cuts(flat, parts):
        spans += _stripped(text, at, start + cut)
        at = start + cut
    return _with_fragments_joined(text, spans)


def _cuts(flat: str, parts: list[str]) -> Iterator[int]:
    """Offsets in `flat` where its parts end, the last at len(flat). sentencex's parts tile its input; a
    part that does not (were it ever to change its text) ends the trust: the rest is one part."""
    at = 0
    for part in parts:
        if not part or not flat.startswith(part, at):
            break
        at += len(part)
        if at < len(flat):
            yield at
    yield len(flat)


def _with_fragments_joined(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` with each fragment (one letter at most: a list marker "1.", a lone initial "M.", an
    ellipsis) joined to the sentence after it, trailing ones to the sentence before; all fragments: one."""
    out: list[tuple[int, int]] = []
    carry: int | None = None  # start of the fragments waiting for a sentence
    for start, end in spans:
        if _TWO_LETTERS.search(text, start, end) is None:
            carry = start if carry is None else carry
            continue
        out.append((start if carry is None else carry, end))
        carry = None
    if carry is not None:
        out[-1:] = [(out[-1][0] if out else carry, spans[-1][1])]
    return out


def _stripped(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[(start, end) narrowed to exclude the whitespace at both ends], or [] if only whitespace is left."""
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    kept = len(piece.rstrip())
    return [(start + lead, start + kept)] if kept > lead else []


def split_long(text: str, span: tuple[int, int], fits: Callable[[str], bool]) -> list[tuple[int, int]]:
    """Spans of pieces of text[span] that each fit (`fits(piece)`), in order, whitespace only between them and
    around them inside the span (the module's contract). The span whole if it fits; else each piece ends at
    the last clause boundary (a mark of CLAUSE_MARKS before whitespace, or of WIDE_CLAUSE_MARKS) within the
    longest prefix that fits, else at its last word end, else at a character (not before a combining mark
    or around a ZWJ where it can). ValueError if one character does not fit, or for a span outside text."""
    begin, end = span
    if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= len(text)):
        raise ValueError(f"span {span!r} is not within the text ({len(text)} characters)")
    bounds = _stripped(text, begin, end)
    if not bounds:
        return []
    start, end = bounds[0]
    pieces = []
    while True:
        if fits(text[start:end]):
            pieces.append((start, end))
            return pieces
        if not fits(text[start]):
            raise ValueError(f"the character {text[start]!r} at {start} does not fit on its own")
        cut = _cut(text, start, _longest_fitting(text, start, end, fits), fits)
        pieces.append((start, cut))
        start = _stripped(text, cut, end)[0][0]  # the rest is not all whitespace: it did not fit


def _longest_fitting(text: str, start: int, end: int, fits: Callable[[str], bool]) -> int:
    """An end p, start < p < end, with text[start:p] fitting and text[start:p + 1] not (binary search: the
    longest fitting prefix when fitting is monotone); text[start] fits and text[start:end] does not."""
    lo, hi = start + 1, end
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(text[start:mid]):
            lo = mid
        else:
            hi = mid
    return lo


def _cut(text: str, start: int, limit: int, fits: Callable[[str], bool]) -> int:
    """The end of the piece that starts at `start`: the first candidate up to `limit` whose piece fits (the
    first one does unless `fits` is not monotone; text[start] alone always does)."""
    for p in _candidates(text, start, limit):
        if fits(text[start:p]):
            return p
    raise AssertionError("unreachable: text[start] fits")  # pragma: no cover


def _candidates(text: str, start: int, limit: int) -> Iterator[int]:
    """Piece ends in (start, limit], best first: clause boundaries, word ends, characters (unjoined
    first), each from the last back; text[p - 1] is never whitespace."""
    positions = range(limit, start, -1)
    yield from (p for p in positions if _is_clause_end(text, p))
    yield from (p for p in positions if text[p].isspace() and not text[p - 1].isspace())
    ends = [p for p in positions if not text[p - 1].isspace()]
    yield from (p for p in ends if not _joined(text, p))
    yield from (p for p in ends if _joined(text, p))


def _is_clause_end(text: str, p: int) -> bool:
    """Whether a clause ends at p (p < len(text)): a clause mark before whitespace, or a wide one."""
    return (text[p - 1] in CLAUSE_MARKS and text[p].isspace()) or text[p - 1] in WIDE_CLAUSE_MARKS


def _joined(text: str, p: int) -> bool:
    """Whether a cut at p (p < len(text)) would split a character from its combining mark or a ZWJ
    sequence."""
    return unicodedata.category(text[p]).startswith("M") or ZWJ in (text[p], text[p - 1])
