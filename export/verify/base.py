"""Verify an exported bundle against the PyTorch model it came from.

Checks: onnx.checker and IR version of both graphs; ONNX Runtime (CPU) vs PyTorch on shapes other
than the export example (batch, src_len, past_len incl. an empty cache, new_len), comparing
log-probabilities, the log-normalizer (logsumexp of the model's logits, export/lowering/logits.py), present
K/V, cross-attention K/V and weights; full greedy decoding with ONNX
Runtime token-identical to `model.decoding.greedy_decode`, both under the rules of the bundle's
`generation` object (suppressed ids, eos at the limit). Used by the export CLI and the tests.

Both decoder interfaces of `interface/names.py` are handled, told apart by the decoder's inputs
(`kv_cache_of`). For an in-place cache (export/verify/inplace.py) the past buffers are larger than
needed and hold garbage beyond each row's length, one-token cases give the rows different past
lengths, and the PyTorch reference is `model.decode` per row over its own concatenated cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from export.lowering.logits import decode_with_normalizer
from export.verify.cases import DEFAULT_CASES, Case, fit_case
from export.verify.inplace import BoundCache, garbage_cache, row_past_lens, row_references, run_shape
from export.verify.parity import ParityError, difference, max_difference
from interface import names
from interface.generation import GenerationSpec
from interface.sessions import cpu_flags, cpu_session_config
from model.config import ModelConfig
from model.decoding import greedy_decode
from model.transformer import Transformer, padding_mask

MAX_IR_VERSION = 13  # the newest IR onnxruntime 1.31 loads


@dataclass
class VerifyReport:
    """Largest absolute differences seen and greedy agreement."""

    encoder_max_diff: float = 0.0  # cross-attention K/V from encoder.onnx
    logprobs_max_diff: float = 0.0
    log_normalizer_max_diff: float = 0.0  # logsumexp of the logits
    present_max_diff: float = 0.0  # updated self-attention cache
    cross_attentions_max_diff: float = 0.0
    kv_cache: str = "concat"  # decoder interface, names.KV_CACHES
    cases: list[list[int]] = field(default_factory=list)  # [batch, src_len, past_len, new_len] as run
    row_past_lens: list[list[int]] = field(default_factory=list)  # per case: cached length of each row
    greedy_sources: int = 0
    greedy_identical: int = 0

    def as_dict(self) -> dict:
        """JSON-friendly dict."""
        return asdict(self)


def cpu_session(model: Path | bytes, so: ort.SessionOptions) -> ort.InferenceSession:
    """A CPU session of a model file (or serialized model); joins ORT's process-wide thread pool if
    a service Runner already set one up.

    Once a process has created ORT's global thread pool, sessions with their own pools are refused
    ("use_per_session_threads must be false when using a global thread pool").
    """
    source = model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    except RuntimeError as e:
        if "global thread pool" not in str(e):
            raise
        so.use_per_session_threads = False
        return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


def open_session(path: Path) -> ort.InferenceSession:
    """A plain CPU session with its own small thread pool (verification only)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    # the kernels the service runs (interface/sessions.py)
    for key, value in cpu_session_config(cpu_flags()).items():
        so.add_session_config_entry(key, value)
    return cpu_session(path, so)


def check_graphs(paths: list[Path]) -> None:
    """onnx.checker (with shape inference) and the IR version of every graph."""
    for path in paths:
        onnx.checker.check_model(str(path), full_check=True)
        ir = onnx.load(str(path), load_external_data=False).ir_version
        if ir > MAX_IR_VERSION:
            raise ParityError(f"{path.name}: ir_version {ir} > {MAX_IR_VERSION} (onnxruntime 1.31 refuses)")


def has_normalizer(dec: ort.InferenceSession) -> bool:
    """Whether the decoder outputs `log_normalizer` (decoders exported before it end at cross_attentions)."""
    return names.LOG_NORMALIZER in [o.name for o in dec.get_outputs()]


def kv_cache_of(dec: ort.InferenceSession) -> str:
    """The decoder's interface: "inplace" if it takes seqlens_k, else "concat"."""
    return "inplace" if names.SEQLENS_K in [i.name for i in dec.get_inputs()] else "concat"


def _flat(kvs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """[(k0, v0), (k1, v1), ...] -> [k0, v0, k1, v1, ...]."""
    return [t for kv in kvs for t in kv]


def source_ids(cfg: ModelConfig, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
    """Random ordinary source ids: drawn from 4..src_vocab-1, a special id (an imported model's pad,
    say) replaced by the first ordinary one (our models' specials are 0..3: nothing to replace)."""
    special = [cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id, cfg.start_id]
    ordinary = next(i for i in range(4, cfg.src_vocab) if i not in special)
    ids = rng.integers(4, cfg.src_vocab, size)
    return np.where(np.isin(ids, special), ordinary, ids)


def random_source(model: Transformer, batch: int, src_len: int, rng: np.random.Generator) -> np.ndarray:
    """Right-padded random source ids (B, S): row 0 is full, others 1..S real tokens."""
    cfg = model.cfg
    lengths = [src_len] + list(rng.integers(1, src_len + 1, batch - 1))
    ids = np.full((batch, src_len), cfg.pad_id, np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = source_ids(cfg, rng, n)
        ids[i, n - 1] = cfg.eos_id
    return ids


def encoder_feeds(src: np.ndarray, pad_id: int) -> dict[str, np.ndarray]:
    """encoder.onnx inputs for right-padded ids."""
    return {names.INPUT_IDS: src, names.ATTENTION_MASK: (src != pad_id).astype(np.int64)}


def decoder_feeds(
    tokens: np.ndarray, positions: np.ndarray, self_mask: np.ndarray | None, src_mask: np.ndarray,
    past: list[np.ndarray], cross: list[np.ndarray], seqlens_k: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """decoder.onnx inputs; past/cross are flat [k0, v0, k1, v1, ...] lists.

    Concat interface: self_mask (B, P+T), the source mask as it is. In-place interface: seqlens_k
    (B,) = per row, cache length after the step - 1 (self_mask None); total_sequence_length is
    derived as max(seqlens_k) + 1, and the right-padded source mask becomes per-row source lengths.
    """
    n = len(cross) // 2
    feeds = {names.INPUT_IDS: tokens, names.POSITION_IDS: positions}
    if seqlens_k is None:
        feeds[names.ATTENTION_MASK] = self_mask
        feeds[names.ENCODER_ATTENTION_MASK] = src_mask
    else:
        lens = np.asarray(seqlens_k, np.int32)
        feeds[names.SEQLENS_K] = lens
        feeds[names.TOTAL_SEQUENCE_LENGTH] = np.array(lens.max() + 1, np.int32)
        feeds[names.ENCODER_SEQLENS_K] = np.maximum(src_mask.sum(axis=1) - 1, 0).astype(np.int32)
        feeds[names.ENCODER_TOTAL_LENGTH] = np.array(src_mask.shape[1], np.int32)
    for i in range(n):
        for j, kv in enumerate(("key", "value")):
            feeds[names.past_name(i, "decoder", kv)] = past[2 * i + j]
            feeds[names.past_name(i, "encoder", kv)] = cross[2 * i + j]
    return feeds


@torch.inference_mode()
def compare_case(
    enc: ort.InferenceSession, dec: ort.InferenceSession, model: Transformer, case: Case,
    rng: np.random.Generator, scaled: bool = True,
) -> dict[str, float]:
    """Run one shape through both runtimes; return the max difference per output kind
    (export/verify/parity.py: scaled beyond 1, or absolute; "log_normalizer" only where the decoder has
    that output).

    An in-place decoder runs `run_shape(case)` (see there) and is compared row by row.
    """
    kv_cache = kv_cache_of(dec)
    case = run_shape(case, kv_cache)
    cfg, n = model.cfg, model.cfg.n_decoder_layers
    src = random_source(model, case.batch, case.src_len, rng)
    src_t = torch.from_numpy(src)
    src_mask = padding_mask(src_t, cfg.pad_id)  # (B, 1, S): PyTorch's own mask
    cross_t = model.cross_kv(model.encode(src_t, src_mask))
    cross = enc.run(names.encoder_outputs(n), encoder_feeds(src, cfg.pad_id))
    diffs = {"encoder": max_difference(cross, _flat(cross_t), scaled)}
    if kv_cache == "inplace":
        lens = row_past_lens(case, kv_cache)
        return diffs | compare_inplace(dec, model, case.new_len, lens, src, cross_t, cross, rng, scaled)

    past_t = None
    if case.past_len:
        prefix = torch.from_numpy(rng.integers(4, cfg.vocab_size, (case.batch, case.past_len)))
        _, past_t, _ = model.decode(prefix, cross_t, src_mask)
    total = case.past_len + case.new_len
    self_mask = np.ones((case.batch, total), np.int64)
    if case.past_len >= 2:
        self_mask[1::2, 0] = 0  # some rows with a masked (padding) slot in the cache
    tokens = rng.integers(4, cfg.vocab_size, (case.batch, case.new_len))
    positions = np.tile(np.arange(case.past_len, total), (case.batch, 1))
    logp_t, presents_t, weights_t, lse_t = decode_with_normalizer(
        model, torch.from_numpy(tokens), cross_t, src_mask, past_t, torch.from_numpy(positions),
        torch.from_numpy(self_mask).bool(),
    )
    empty = np.zeros((case.batch, cfg.n_heads, 0, cfg.d_head), np.float32)
    past = [t.numpy() for t in _flat(past_t)] if past_t else [empty] * (2 * n)
    enc_mask = encoder_feeds(src, cfg.pad_id)[names.ATTENTION_MASK]
    feeds = decoder_feeds(tokens, positions, self_mask, enc_mask, past, cross)
    with_lse = has_normalizer(dec)
    out = dict(zip(wanted := names.decoder_outputs(n, with_lse), dec.run(wanted, feeds), strict=True))
    diffs["logprobs"] = difference(out[names.LOGPROBS], logp_t, scaled)
    diffs["present"] = max_difference([out[p] for p in names.self_cache_io(n).values()], _flat(presents_t),
                                      scaled)
    diffs["cross_attentions"] = difference(out[names.CROSS_ATTENTIONS], weights_t.mean(dim=1), scaled)
    if with_lse:
        diffs["log_normalizer"] = difference(out[names.LOG_NORMALIZER], lse_t, scaled)
    return diffs


@torch.inference_mode()
def compare_inplace(
    dec: ort.InferenceSession, model: Transformer, new_len: int, lens: list[int], src: np.ndarray,
    cross_t: list[tuple[torch.Tensor, torch.Tensor]], cross: list[np.ndarray], rng: np.random.Generator,
    scaled: bool = True,
) -> dict[str, float]:
    """One in-place decoder step, rows with past lengths `lens`, vs `model.decode` row by row.

    The encoder K/V hold garbage beyond each row's source (the decoder goes by encoder_seqlens_k),
    and cross_attentions is compared over each row's source only (beyond it, it is unspecified).
    """
    cfg, n, b = model.cfg, model.cfg.n_decoder_layers, len(lens)
    src_lens = (src != cfg.pad_id).sum(axis=1)
    cross = [c.copy() for c in cross]
    for c in cross:
        for r, s in enumerate(src_lens):
            c[r, :, s:] = garbage_cache(1, c[r, :, s:].shape, rng)[0]
    capacity = max(lens) + new_len + int(rng.integers(1, 8))  # more columns than any row needs
    past = garbage_cache(2 * n, (b, cfg.n_heads, capacity, cfg.d_head), rng)
    tokens = rng.integers(4, cfg.vocab_size, (b, new_len))
    src_mask = padding_mask(torch.from_numpy(src), cfg.pad_id)
    refs = row_references(model, tokens, lens, src_mask, cross_t, past, rng)  # fills the rows' columns
    positions = np.array([np.arange(p, p + new_len) for p in lens], np.int64)
    seqlens_k, enc_mask = np.array(lens) + new_len - 1, (src != cfg.pad_id).astype(np.int64)
    feeds = decoder_feeds(tokens, positions, None, enc_mask, past, cross, seqlens_k)
    with_lse = has_normalizer(dec)
    out = dict(zip(wanted := names.decoder_outputs(n, with_lse), dec.run(wanted, feeds), strict=True))
    presents = [out[p] for p in names.self_cache_io(n).values()]
    diffs = dict.fromkeys(["logprobs", "present", "cross_attentions"] + ["log_normalizer"] * with_lse, 0.0)
    for r, (p, (logp_t, presents_t, weights_t, lse_t)) in enumerate(zip(lens, refs, strict=True)):
        valid = [o[r : r + 1, :, : p + new_len] for o in presents]  # the row's columns only
        got = {"logprobs": difference(out[names.LOGPROBS][r : r + 1], logp_t, scaled),
               "present": max_difference(valid, _flat(presents_t), scaled),
               "cross_attentions": difference(out[names.CROSS_ATTENTIONS][r : r + 1, :, : src_lens[r]],
                                              weights_t.mean(dim=1)[..., : src_lens[r]], scaled)}
        if with_lse:
            got["log_normalizer"] = difference(out[names.LOG_NORMALIZER][r : r + 1], lse_t, scaled)
        diffs = {k: max(v, got[k]) for k, v in diffs.items()}
    return diffs


def empty_cache(kv_cache: str, cross: list[np.ndarray], capacity: int) -> list[np.ndarray]:
    """Self-attention cache of nobody yet: (B, H, 0, Dh) for concat, zeros (B, H, capacity, Dh) in place."""
    cols = capacity if kv_cache == "inplace" else 0
    return [np.zeros((*c.shape[:2], cols, c.shape[3]), c.dtype) for c in cross]


def step_feeds(
    kv_cache: str, tokens: np.ndarray, step: int, src_mask: np.ndarray, past: list[np.ndarray],
    cross: list[np.ndarray],
) -> dict[str, np.ndarray]:
    """Decoder inputs of greedy step `step`: one new token per row, `step` cached ones before it."""
    b = tokens.shape[0]
    positions = np.full((b, 1), step, np.int64)
    if kv_cache == "inplace":
        return decoder_feeds(tokens, positions, None, src_mask, past, cross, np.full(b, step, np.int32))
    return decoder_feeds(tokens, positions, np.ones((b, step + 1), np.int64), src_mask, past, cross)


def greedy_onnx(
    enc: ort.InferenceSession, dec: ort.InferenceSession, src: np.ndarray, start: int, eos: int, pad: int,
    max_new_tokens: int, suppress: tuple[int, ...] = (), eos_at_limit: bool = False,
) -> list[list[int]]:
    """Greedy decoding with ONNX Runtime, step by step like `greedy_decode` (empty cache first), with
    its rules: `suppress` ids never picked, eos as the last step's token with `eos_at_limit`.

    An in-place decoder gets buffers of max_new_tokens columns, bound as past and present (IO
    binding, as served), so the steps really update them in place.
    """
    b, kv_cache = src.shape[0], kv_cache_of(dec)
    feeds = encoder_feeds(src, pad)
    cross = enc.run(None, feeds)
    n = len(cross) // 2
    past = empty_cache(kv_cache, cross, max_new_tokens)
    bound = BoundCache(dec, past) if kv_cache == "inplace" else None
    token = np.full((b, 1), start, np.int64)
    out: list[list[int]] = [[] for _ in range(b)]
    done = np.zeros(b, bool)
    for step in range(max_new_tokens):
        step_in = step_feeds(kv_cache, token, step, feeds[names.ATTENTION_MASK], past, cross)
        if bound is not None:
            logp = bound.run(step_in)
        else:
            logp, *past = dec.run([names.LOGPROBS, *names.self_cache_io(n).values()], step_in)
        scores = logp[:, -1].astype(np.float32)
        scores[:, list(suppress)] = -np.inf
        if eos_at_limit and step == max_new_tokens - 1:
            scores[:] = -np.inf
            scores[:, eos] = 0.0
        token = scores.argmax(-1).reshape(b, 1)
        for i in np.flatnonzero(~done):
            if token[i, 0] != eos:
                out[i].append(int(token[i, 0]))
        done |= token[:, 0] == eos
        if done.all():
            break
    return out


def greedy_agreement(
    enc: ort.InferenceSession, dec: ort.InferenceSession, model: Transformer, sources: list[list[int]],
    batch_size: int = 4, rules: GenerationSpec | None = None,
) -> tuple[int, list[tuple[list[int], list[int], list[int]]]]:
    """Decode sources (ids incl. eos) with both, under the bundle's rules (its suppressed ids, eos at the
    limit: what the runtime applies); return (#identical, mismatches as (onnx, torch, source))."""
    cfg, rules = model.cfg, rules or GenerationSpec()
    suppress, at_limit = rules.suppress_ids, rules.forced_eos_at_limit
    same, bad = 0, []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        src = np.full((len(chunk), max(map(len, chunk))), cfg.pad_id, np.int64)
        for i, s in enumerate(chunk):
            src[i, : len(s)] = s
        budget = min(cfg.max_len - 1, 3 * src.shape[1] + 10)
        ours = greedy_onnx(enc, dec, src, cfg.start_id, cfg.eos_id, cfg.pad_id, budget, suppress, at_limit)
        ref = [h.tokens for h in greedy_decode(model, torch.from_numpy(src), budget, suppress, at_limit)]
        for a, b, source in zip(ours, ref, chunk, strict=True):
            same += a == b
            if a != b:
                bad.append((a, b, source))
    return same, bad


def verify_bundle(
    bundle_dir: Path,
    model: Transformer,
    sources: list[list[int]],
    cases: tuple[Case, ...] = DEFAULT_CASES,
    atol: float = 1e-4,
    seed: int = 0,
    rules: GenerationSpec | None = None,
) -> VerifyReport:
    """Check encoder.onnx + decoder.onnx of bundle_dir against model; raise ParityError on failure
    (greedy decoding under the bundle's `generation` rules).

    report.cases lists the shapes as run (an in-place decoder may run a case with batch 1, see
    `run_shape`), report.row_past_lens the cached length of each row in each case.
    """
    model = model.eval()
    paths = [bundle_dir / names.ENCODER_FILE, bundle_dir / names.DECODER_FILE]
    check_graphs(paths)
    enc, dec = (open_session(p) for p in paths)
    report, rng = VerifyReport(kv_cache=kv_cache_of(dec)), np.random.default_rng(seed)
    if not has_normalizer(dec):
        raise ParityError(f"{names.DECODER_FILE} has no {names.LOG_NORMALIZER} output")
    for case in (run_shape(fit_case(c, model.cfg.max_len), report.kv_cache) for c in cases):
        d = compare_case(enc, dec, model, case, rng)
        report.cases.append([case.batch, case.src_len, case.past_len, case.new_len])
        report.row_past_lens.append(row_past_lens(case, report.kv_cache))
        report.encoder_max_diff = max(report.encoder_max_diff, d["encoder"])
        report.logprobs_max_diff = max(report.logprobs_max_diff, d["logprobs"])
        report.log_normalizer_max_diff = max(report.log_normalizer_max_diff, d["log_normalizer"])
        report.present_max_diff = max(report.present_max_diff, d["present"])
        report.cross_attentions_max_diff = max(report.cross_attentions_max_diff, d["cross_attentions"])
        worst = max(d, key=d.get)
        if d[worst] > atol:
            raise ParityError(f"{worst} differs by {d[worst]:.3g} > {atol} at {case}")
    same, bad = greedy_agreement(enc, dec, model, sources, rules=rules)
    report.greedy_sources, report.greedy_identical = len(sources), same
    if bad:
        onnx_ids, torch_ids, _ = bad[0]
        raise ParityError(f"greedy decoding differs on {len(bad)}/{len(sources)} sources, "
                          f"e.g. ONNX {onnx_ids} vs PyTorch {torch_ids}")
    return report

