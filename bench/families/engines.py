"""The engines bench/families/compare.py times, each built in a process of its own (module level: the child
of bench/engines/process.py's EngineProcess, and bench/families/footprint.py's, import it): our `Runner` on
a bundle variant, CTranslate2 of a compute type; and the token bookkeeping they share.

Both decode greedily with the checkpoint's own rules: ours applies the bundle's generation rules and
defaults (the import's), CTranslate2 is given the same ones from the directory's generation_config.json
(`ct2_rules`): the forced first token as a target prefix (the target language, or forced_bos_token_id),
no_repeat_ngram_size, and min_length as a minimum length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Output = tuple[list[int], float]  # generated ids (no eos), total log-prob
ORT, CT2 = "onnxruntime", "ctranslate2"
ORT_INT8, CT2_INT8 = "onnxruntime int8", "ctranslate2 int8"
OURS = {ORT: "base", ORT_INT8: "int8"}  # our engines -> the bundle variant they run
THEIRS = {CT2: "float32", CT2_INT8: "int8"}  # CTranslate2's -> its compute type
CT2_DIRS = {"float32": "ct2", "int8": "ct2-int8"}  # compute type -> CTranslate2 model directory under out/


def ct2_rules(hf_dir: Path, vocab: list[str], languages: tuple[str, str] | None,
              new_tokens: int) -> tuple[list[str], dict[str, Any]]:
    """The target prefix and the translate_batch options that decode as the checkpoint's generation config
    does, bar the search and the length: its forced first token, no_repeat_ngram_size and min_length (the
    decoder start counted, as transformers counts it; at most the length limit)."""
    path = hf_dir / "generation_config.json"
    settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    forced = settings.get("forced_bos_token_id")
    prefix = [languages[1]] if languages else [] if forced is None else [vocab[forced]]
    options: dict[str, Any] = {"no_repeat_ngram_size": settings.get("no_repeat_ngram_size") or 0}
    if settings.get("min_length"):
        options["min_decoding_length"] = min(settings["min_length"] - 1, new_tokens)
    return prefix, options


def family_engine(name: str, family: str, bundle: Path, out: Path, hf_dir: Path, threads: int,
                  new_tokens: int):
    """A decoder of `family`'s model taking a batch of source ids (or, CTranslate2 only, texts) to
    [(ids, log-prob)]; `out` holds the CTranslate2 model directories (CT2_DIRS)."""
    from bench.families.registry import FAMILIES

    fam = FAMILIES[family]
    source_language, target_language = fam.languages or (None, None)
    if name in OURS:
        from service.domain.types import DecodeOptions
        from service.runtime.runner import Runner

        runner = Runner(bundle, intra_op_threads=threads, variant=OURS[name])
        options = DecodeOptions(beam_size=1, max_output_tokens=new_tokens,  # greedy, as CTranslate2 is run
                                source_language=source_language, target_language=target_language)

        def ours(batch: list[list[int]]) -> list[Output]:
            """Greedy through the service's decode batch."""
            hyps = runner.translate(batch, options, max_rows=len(batch))
            return [(h[0].tokens, h[0].log_prob) for h in hyps]
        return ours
    if name in THEIRS:
        return Ct2Engine(name, fam, Path(out), Path(hf_dir), threads, new_tokens)
    raise ValueError(f"unknown engine {name!r}")


class Ct2Engine:
    """CTranslate2 of a compute type on a family's converted model: a batch of source ids (as vocabulary
    strings) or texts (the family's codec in, text out) -> [(ids, total log-prob)], greedy."""

    def __init__(self, name: str, fam: Any, out: Path, hf_dir: Path, threads: int, new_tokens: int) -> None:
        import ctranslate2

        ct2_dir = out / CT2_DIRS[THEIRS[name]]
        self.translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=threads,
                                                 inter_threads=1, compute_type=THEIRS[name])
        self.vocab = json.loads((ct2_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
        self.index: dict[str, int] = {}  # a token's first id: T5's converted vocabulary names the rows
        for i, t in enumerate(self.vocab):  # past its tokenizer's <extra_id_0>, <extra_id_1>, ... again
            self.index.setdefault(t, i)
        self.prefix, self.rules = ct2_rules(hf_dir, self.vocab, fam.languages, new_tokens)
        self.codec, self.new_tokens = fam.codec(hf_dir), new_tokens

    def tokens(self, batch: list[list[int]] | list[str]) -> list[list[str]]:
        """Source tokens of ids or texts."""
        if batch and isinstance(batch[0], str):
            return [self.codec.encode(t) for t in batch]
        return [[self.vocab[i] for i in ids] for ids in batch]

    def __call__(self, batch: list[list[int]] | list[str]) -> list[Output]:
        """Greedy; a hypothesis holds the target prefix (counted in max_decoding_length), its score only
        the tokens after it."""
        tokens = self.tokens(batch)
        results = self.translator.translate_batch(  # length_penalty 0: the score is the total log-prob
            tokens, target_prefix=[self.prefix] * len(tokens) if self.prefix else None, beam_size=1,
            max_batch_size=len(tokens), max_decoding_length=self.new_tokens, return_scores=True,
            length_penalty=0.0, **self.rules)
        for r in results if batch and isinstance(batch[0], str) else ():
            self.codec.decode(r.hypotheses[0])  # the text a user would get (timed, not kept)
        return [([self.index[t] for t in r.hypotheses[0]], r.scores[0]) for r in results]


def steps(tokens: list[int], new_tokens: int) -> int:
    """Decoder steps that generated these tokens (and an eos after them, unless at the limit)."""
    return min(len(tokens) + 1, new_tokens)


def source_ids(hf_dir: Path, texts: list[str]) -> list[list[int]]:
    """The family's transformers tokenizer's ids of the texts (its special tokens included: eos, BART's
    bos, a many-to-many model's source language as it was saved)."""
    from transformers import AutoTokenizer

    return [list(ids) for ids in AutoTokenizer.from_pretrained(hf_dir)(texts)["input_ids"]]


def same(ours: list[int], theirs: list[int], free: int) -> bool:
    """Ours equal to CTranslate2's first `free` tokens (all of them unless eos is forced at the limit)."""
    return ours == theirs[:free]
