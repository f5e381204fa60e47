"""Train a Transformer on a TSV parallel corpus (source<TAB>target per line).

    python -m model.train --train data/corpus/train.tsv --valid data/corpus/valid.tsv --out runs/x

Adam with the paper's schedule lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
(times --lr-scale), label smoothing, dropout, batches by token count, gradient clipping,
periodic validation (loss, exact match, BLEU, chrF), best-checkpoint saving and resume: running the
same command again continues from `<out>/last.pt`. After each validation the learning curve of
`<out>/metrics.jsonl` (after those of `--earlier-metrics`) is drawn to `<out>/learning-curve.svg`
when matplotlib is installed (the `train` extra).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from model.checkpoint import save_checkpoint, tokenizer_path
from model.config import ModelConfig
from model.data import CorpusError, encode_pairs, read_tsv, token_batches
from model.evaluate import evaluate
from model.learning_curve import draw_run
from model.tokenizer import load_tokenizer, train_tokenizer
from model.transformer import Transformer


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (paper, eq. 3)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@torch.no_grad()
def validation_loss(model: Transformer, examples: list, a: argparse.Namespace) -> float:
    """Cross-entropy per target token on the validation pairs, with the training's label smoothing."""
    model.eval()
    cfg, total, count = model.cfg, 0.0, 0
    for batch in token_batches(examples, a.max_tokens, cfg.pad_id, cfg.bos_id, random.Random(0)):
        batch = batch.to(a.device)
        logp = model(batch.src, batch.tgt_in)
        total += F.cross_entropy(logp.transpose(1, 2), batch.tgt_out, ignore_index=cfg.pad_id,
                                 label_smoothing=a.label_smoothing, reduction="sum").item()
        count += int((batch.tgt_out != cfg.pad_id).sum())
    return total / max(1, count)


def learning_rate(step: int, a: argparse.Namespace, d_model: int) -> float:
    """Noam schedule, then (with --cooldown-steps) a linear decay to 0 from --cooldown-from on."""
    if not a.cooldown_steps or step <= a.cooldown_from:
        return noam_lr(step, d_model, a.warmup, a.lr_scale)
    frac = max(0.0, 1.0 - (step - a.cooldown_from) / a.cooldown_steps)
    return noam_lr(a.cooldown_from, d_model, a.warmup, a.lr_scale) * frac


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=Path, nargs="+", required=True, help="one or more TSV files")
    ap.add_argument("--valid", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="run directory (checkpoints, tokenizer, log)")
    ap.add_argument("--tokenizer", type=Path, help="existing tokenizer.json (default: train one)")
    ap.add_argument("--init", type=Path, help="start from this checkpoint's weights, config and tokenizer "
                    "(fine-tuning: a fresh optimizer and schedule; the model options are ignored)")
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--encoder-layers", type=int, default=3)
    ap.add_argument("--decoder-layers", type=int, default=3)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--pre-ln", action="store_true", help="pre-LN instead of the paper's post-LN")
    ap.add_argument("--no-tie", action="store_true", help="separate source/target/output embeddings")
    ap.add_argument("--max-tokens", type=int, default=4000, help="padded tokens per batch")
    ap.add_argument("--warmup", type=int, default=4000)
    ap.add_argument("--lr-scale", type=float, default=1.0)
    ap.add_argument("--cooldown-from", type=int, default=0, help="step where the linear decay starts")
    ap.add_argument("--cooldown-steps", type=int, default=0,
                    help="decay the learning rate linearly to 0 over this many steps (0: off)")
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="max gradient norm (0: off)")
    ap.add_argument("--max-steps", type=int, default=100_000)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop after this much time (0: off)")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-size", type=int, default=300, help="validation pairs decoded per eval")
    ap.add_argument("--target-em", type=float, default=101.0, help="stop once validation EM >= this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--earlier-metrics", type=Path, nargs="*", default=[],
                    help="metrics.jsonl of earlier stages, drawn before this run's in learning-curve.svg")
    return ap.parse_args(argv)


def build_model(a: argparse.Namespace, vocab_size: int) -> Transformer:
    """A fresh model from the options."""
    cfg = ModelConfig(
        vocab_size=vocab_size, d_model=a.d_model, n_heads=a.heads, n_encoder_layers=a.encoder_layers,
        n_decoder_layers=a.decoder_layers, d_ff=a.d_ff, dropout=a.dropout, max_len=a.max_len,
        norm_first=a.pre_ln, tie_embeddings=not a.no_tie,
    )
    return Transformer(cfg)


def train(a: argparse.Namespace) -> dict:
    """Run training; return the best validation metrics."""
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    a.out.mkdir(parents=True, exist_ok=True)
    train_pairs = [pair for path in a.train for pair in read_tsv(path)]
    valid_pairs = read_tsv(a.valid)[: a.eval_size]
    last, best_file = a.out / "last.pt", a.out / "best.pt"
    state = torch.load(last, map_location=a.device, weights_only=True) if last.exists() else None
    init = torch.load(a.init, map_location=a.device, weights_only=True) if a.init and not state else None
    tok_file = a.out / "tokenizer.json"
    if not tok_file.exists():
        given = tokenizer_path(a.init, init) if init else a.tokenizer
        tok = load_tokenizer(given) if given else train_tokenizer(
            (t for pair in train_pairs for t in pair), a.vocab_size)
        tok.save(str(tok_file))
    tok = load_tokenizer(tok_file)

    config = (state or init or {}).get("config")
    model = (Transformer(ModelConfig.from_dict(config)) if config
             else build_model(a, tok.get_vocab_size())).to(a.device)
    if init:
        model.load_state_dict(init["model"])
        print(f"initialized from {a.init} (step {init.get('step', 0)})", file=sys.stderr)
    cfg = model.cfg
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    step, elapsed, best = 0, 0.0, {"exact_match": -1.0, "chrf": -1.0}
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, elapsed, best = state["step"], state["elapsed"], state["best"]
        print(f"resumed from {last} at step {step}", file=sys.stderr)

    examples = encode_pairs(tok, train_pairs, cfg.eos_id, cfg.max_len)
    valid_examples = encode_pairs(tok, valid_pairs, cfg.eos_id, cfg.max_len)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{len(examples)} training pairs, {n_params / 1e6:.2f}M parameters, device {a.device}",
          file=sys.stderr)
    rng = random.Random(a.seed + step)
    log = (a.out / "metrics.jsonl").open("a")
    bar = tqdm(total=a.max_steps, initial=step, desc="train", dynamic_ncols=True)
    t0, tokens, loss_sum, loss_n = time.time() - elapsed, 0, 0.0, 0
    window = time.time()
    stop = False
    while not stop:
        for batch in token_batches(examples, a.max_tokens, cfg.pad_id, cfg.bos_id, rng):
            model.train()
            step += 1
            lr = learning_rate(step, a, cfg.d_model)
            for g in opt.param_groups:
                g["lr"] = lr
            batch = batch.to(a.device)
            logp = model(batch.src, batch.tgt_in)  # (B, T, V)
            loss = F.cross_entropy(logp.transpose(1, 2), batch.tgt_out, ignore_index=cfg.pad_id,
                                   label_smoothing=a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            tokens += batch.n_tokens
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}")
            minutes = (time.time() - t0) / 60
            out_of_time = a.max_minutes and minutes >= a.max_minutes
            if step % a.eval_every == 0 or step >= a.max_steps or out_of_time:
                model.eval()
                scores, _ = evaluate(model, tok, valid_pairs)
                metrics = {"step": step, "minutes": round(minutes, 2), "loss": round(loss_sum / loss_n, 4),
                           "valid_loss": round(validation_loss(model, valid_examples, a), 4),
                           "lr": lr, "tokens_per_s": round(tokens / max(1e-9, time.time() - window), 1),
                           **scores.as_dict()}
                loss_sum, loss_n = 0.0, 0
                log.write(json.dumps(metrics) + "\n")
                log.flush()
                tqdm.write(json.dumps(metrics))
                draw_run(a.out / "metrics.jsonl", a.earlier_metrics)
                if (scores.exact_match, scores.chrf) > (best["exact_match"], best["chrf"]):
                    best = {k: metrics[k] for k in ("step", "exact_match", "bleu", "chrf")}
                    save_checkpoint(best_file, model, step, "tokenizer.json", metrics=best)
                save_checkpoint(last, model, step, "tokenizer.json", optimizer=opt.state_dict(),
                                elapsed=time.time() - t0, best=best)
                tokens, window = 0, time.time()
                stop = step >= a.max_steps or bool(out_of_time) or scores.exact_match >= a.target_em
            if stop:
                break
    bar.close()
    return best


def main() -> None:
    """CLI entry point."""
    a = parse_args()
    try:
        best = train(a)
    except CorpusError as e:
        sys.exit(f"error: {e}")
    print(json.dumps({"best": best}))


if __name__ == "__main__":
    main()
