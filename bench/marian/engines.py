"""The engines bench/marian/compare.py times, each built in a process of its own (module level: the child
of bench/engines/process.py's EngineProcess, and bench/marian/footprint.py's, import it): our `Runner` on a
bundle variant, CTranslate2 of a compute type; and the token bookkeeping they share."""

from __future__ import annotations

import json
from pathlib import Path

Output = tuple[list[int], float]  # generated ids (no eos), total log-prob
ORT, CT2 = "onnxruntime", "ctranslate2"
ORT_INT8, CT2_INT8 = "onnxruntime int8", "ctranslate2 int8"
OURS = {ORT: "base", ORT_INT8: "int8"}  # our engines -> the bundle variant they run
THEIRS = {CT2: "float32", CT2_INT8: "int8"}  # CTranslate2's -> its compute type
CT2_DIRS = {"float32": "ct2", "int8": "ct2-int8"}  # compute type -> CTranslate2 model directory under out/


def marian_engine(name: str, bundle: Path, out: Path, hf_dir: Path, threads: int, new_tokens: int):
    """A decoder taking a batch of source ids (or, CTranslate2 only, texts) to [(ids, log-prob)]; `out` holds
    the CTranslate2 model directories (CT2_DIRS)."""
    if name in OURS:
        from service.domain.types import DecodeOptions
        from service.runtime.runner import Runner

        runner = Runner(bundle, intra_op_threads=threads, variant=OURS[name])
        options = DecodeOptions(beam_size=1, max_output_tokens=new_tokens)  # greedy, as CTranslate2 is run

        def ours(batch: list[list[int]]) -> list[Output]:
            """Greedy through the service's decode batch."""
            hyps = runner.translate(batch, options, max_rows=len(batch))
            return [(h[0].tokens, h[0].log_prob) for h in hyps]
        return ours
    if name in THEIRS:
        import ctranslate2
        import sentencepiece

        ct2_dir, hf_dir = Path(out) / CT2_DIRS[THEIRS[name]], Path(hf_dir)
        translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=threads,
                                            inter_threads=1, compute_type=THEIRS[name])
        vocab = json.loads((ct2_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
        index = {t: i for i, t in enumerate(vocab)}
        source = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
        target = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "target.spm"))

        def theirs(batch: list[list[int]] | list[str]) -> list[Output]:
            """Greedy in CTranslate2 on ids (as vocabulary strings) or texts (SentencePiece in, text out)."""
            texts = bool(batch) and isinstance(batch[0], str)
            tokens = ([[*source.encode(t, out_type=str), "</s>"] for t in batch] if texts
                      else [[vocab[i] for i in ids] for ids in batch])
            results = translator.translate_batch(  # length_penalty 0: the score is the total log-prob
                tokens, beam_size=1, max_batch_size=len(tokens), max_decoding_length=new_tokens,
                return_scores=True, length_penalty=0.0)
            for r in results if texts else ():
                target.decode_pieces(r.hypotheses[0])  # the text a user would get (timed, not kept)
            return [([index[t] for t in r.hypotheses[0]], r.scores[0]) for r in results]
        return theirs
    raise ValueError(f"unknown engine {name!r}")


def steps(tokens: list[int], new_tokens: int) -> int:
    """Decoder steps that generated these tokens (and an eos after them, unless at the limit)."""
    return min(len(tokens) + 1, new_tokens)


def source_ids(hf_dir: Path, texts: list[str]) -> list[list[int]]:
    """MarianTokenizer's ids of the texts (+ eos): source SentencePiece pieces through vocab.json."""
    import sentencepiece

    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    sp = sentencepiece.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
    unk, eos = vocab["<unk>"], vocab["</s>"]
    return [[vocab.get(p, unk) for p in sp.encode(t, out_type=str)] + [eos] for t in texts]


def same(ours: list[int], theirs: list[int], free: int) -> bool:
    """Ours equal to CTranslate2's first `free` tokens (all of them unless eos is forced at the limit)."""
    return ours == theirs[:free]
