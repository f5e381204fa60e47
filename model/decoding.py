"""Reference decoders in PyTorch: batched greedy and beam search with the KV cache.

The torch-free runner in `service/` implements the same algorithms on ONNX Runtime and is tested
token for token against these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from model.transformer import Transformer, padding_mask


@dataclass
class Hypothesis:
    """One decoded sequence: tokens (no bos/eos), total log-probability, normalized score."""

    tokens: list[int]
    log_prob: float
    score: float
    finished: bool  # True if it ended with eos, False if it hit the length limit
    alignment: list[list[float]] = field(default_factory=list)  # (len(tokens), S)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha; alpha = 0 disables it."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.inference_mode()
def greedy_decode(model: Transformer, src: Tensor, max_new_tokens: int, suppress: Sequence[int] = (),
                  eos_at_limit: bool = False) -> list[Hypothesis]:
    """Pick the argmax token at each step; a sequence stops growing at eos.

    The rules of an imported model's bundle (interface/generation.py): `suppress` ids are never
    picked, and with `eos_at_limit` the last step's token is eos, adding 0 to the log-prob.
    """
    cfg = model.cfg
    src_mask = padding_mask(src, cfg.pad_id)
    cross = model.cross_kv(model.encode(src, src_mask))
    b = src.size(0)
    token = torch.full((b, 1), cfg.start_id, dtype=torch.long)
    out: list[list[int]] = [[] for _ in range(b)]
    log_prob = torch.zeros(b)
    done = torch.zeros(b, dtype=torch.bool)
    past = None
    for step in range(max_new_tokens):
        logp, past, _ = model.decode(token, cross, src_mask, past)
        logp = logp[:, -1]
        if suppress:
            logp[:, list(suppress)] = float("-inf")
        if eos_at_limit and step == max_new_tokens - 1:
            logp = torch.full_like(logp, float("-inf")).index_fill_(1, torch.tensor([cfg.eos_id]), 0.0)
        best, token = logp.max(dim=-1, keepdim=True)  # (B, 1)
        log_prob += torch.where(done, 0.0, best.squeeze(1))
        for i in (~done).nonzero().flatten().tolist():
            if token[i, 0] != cfg.eos_id:
                out[i].append(int(token[i, 0]))
        done |= token.squeeze(1) == cfg.eos_id
        if done.all():
            break
    return [
        Hypothesis(out[i], float(log_prob[i]), float(log_prob[i]), bool(done[i])) for i in range(b)
    ]


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    max_new_tokens: int,
    beam_size: int = 4,
    n_best: int = 1,
    alpha: float = 0.0,
    with_alignment: bool = False,
) -> list[list[Hypothesis]]:
    """Batched beam search over src (B, S); returns the n best hypotheses of each source.

    Finished beams stay in the beam with a frozen score (only padding follows eos), so beam
    size 1 is exactly greedy decoding. Hypotheses are ranked by log_prob / length_penalty.
    """
    cfg = model.cfg
    b, k = src.size(0), beam_size
    src_mask = padding_mask(src, cfg.pad_id)  # (B, 1, S)
    cross = model.cross_kv(model.encode(src, src_mask))
    # every source repeated k times: row r*k + j is beam j of source r
    src_mask = src_mask.repeat_interleave(k, dim=0)
    cross = [(kk.repeat_interleave(k, dim=0), vv.repeat_interleave(k, dim=0)) for kk, vv in cross]
    scores = torch.full((b, k), float("-inf"))
    scores[:, 0] = 0.0  # all beams start identical: keep one alive
    tokens = torch.full((b * k, 1), cfg.start_id, dtype=torch.long)
    finished = torch.zeros(b * k, dtype=torch.bool)
    lengths = torch.zeros(b * k, dtype=torch.long)
    attn: list[Tensor] = []
    past = None
    for _ in range(max_new_tokens):
        logp, past, weights = model.decode(tokens[:, -1:], cross, src_mask, past)
        logp = logp[:, -1].float()  # (B*K, V)
        # a finished beam can only be followed by padding, at no cost
        logp[finished] = float("-inf")
        logp[finished, cfg.pad_id] = 0.0
        cand = (scores.view(-1, 1) + logp).view(b, k * logp.size(-1))  # (B, K*V)
        scores, idx = cand.topk(k, dim=-1)  # (B, K)
        beam = (idx // logp.size(-1) + torch.arange(b).unsqueeze(1) * k).view(-1)
        word = (idx % logp.size(-1)).view(-1)
        past = [(kk[beam], vv[beam]) for kk, vv in past]
        tokens = torch.cat([tokens[beam], word.unsqueeze(1)], dim=1)
        was_finished = finished[beam]
        lengths = lengths[beam] + (~was_finished).long()
        finished = was_finished | (word == cfg.eos_id)
        if with_alignment:
            attn = [a[beam] for a in attn] + [weights.mean(dim=1)[beam, -1]]  # (B*K, S)
        if finished.all():
            break
    return [_collect(tokens, scores, finished, lengths, attn, r, k, n_best, alpha, cfg) for r in range(b)]


def _collect(tokens, scores, finished, lengths, attn, r, k, n_best, alpha, cfg) -> list[Hypothesis]:
    """Rank the k beams of source r and keep the n best."""
    hyps = []
    for j in range(k):
        row = r * k + j
        log_prob = float(scores[r, j])
        if log_prob == float("-inf"):
            continue
        n = int(lengths[row])  # generated tokens including eos if finished
        body = tokens[row, 1 : 1 + n].tolist()
        done = bool(finished[row])
        if done:
            body = body[:-1]
        align = [attn[t][row].tolist() for t in range(len(body))] if attn else []
        hyps.append(Hypothesis(body, log_prob, log_prob / length_penalty(n, alpha), done, align))
    hyps.sort(key=lambda h: h.score, reverse=True)
    return hyps[:n_best]
