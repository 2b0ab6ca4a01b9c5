"""Training throughput: lnrepro's encoder-decoder against torch.nn.Transformer, same sizes, batch, loss, optimizer.

    python benchmarks/train_throughput.py [--layers 6 18] [--batch 32 --length 30] [--out benchmarks/results/train.json]
                                          [--compile] [--profile]

Target tokens per second = target tokens in the batch / median step time (forward, backward, Adam step) after
warm-up. Both models: d 512, FFN 2048, 8 heads, dropout 0.1, shared embeddings, Post-LN, fp32 on CPU (bf16
autocast on a GPU). Both use the optimizer training uses (repro/train/optim.py: Adam, fused on a GPU). --compile
wraps both models in torch.compile (as train.compile does); --profile prints the top operators of torch's
profiler over five steps of lnrepro's model (self device time on a GPU, self CPU time otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from common import machine, median_time, peak_rss_mb, print_profile, write_json
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import VARIANTS
from repro.train.optim import label_smoothed_nll, make_optimizer

VOCAB, PAD = 32000, 1


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings and tied output projection."""

    def __init__(self, layers: int, d: int = 512, vocab: int = VOCAB):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=PAD)
        self.core = nn.Transformer(d, 8, layers, layers, 4 * d, dropout=0.1, batch_first=True, norm_first=False)
        self.d = d

    def forward(self, src, prev):
        pos = lambda t: torch.zeros(t.size(1), self.d, device=t.device)
        s = self.embed(src) * self.d ** 0.5 + pos(src)
        t = self.embed(prev) * self.d ** 0.5 + pos(prev)
        mask = nn.Transformer.generate_square_subsequent_mask(prev.size(1), device=prev.device)
        h = self.core(s, t, tgt_mask=mask, src_key_padding_mask=src.eq(PAD), tgt_is_causal=True)
        return F.linear(h, self.embed.weight)


def train_flops_per_target_token(enc: int, dec: int, d: int = 512, ffn: int = 2048, vocab: int = VOCAB,
                                  src_len: int = 30, tgt_len: int = 30) -> float:
    """Model FLOPs of one training step per target token (forward + backward = 3 x forward; a multiply-add is 2).

    Per target token the forward pass runs src_len / tgt_len source tokens through the encoder and one token through
    the decoder: encoder layer 4d^2 (attention projections) + 2 d ffn (FFN) weights and 2 * 2 src_len d for the
    attention scores and sums; decoder layer 8d^2 + 2 d ffn weights, 2 * 2 tgt_len d (self, full square counted)
    + 2 * 2 src_len d (cross); output projection d * vocab. Embedding lookups, norms and softmaxes are not counted.
    """
    ratio = src_len / tgt_len
    encoder = enc * ratio * (2 * (4 * d * d + 2 * d * ffn) + 4 * src_len * d)
    decoder = dec * (2 * (8 * d * d + 2 * d * ffn) + 4 * tgt_len * d + 4 * src_len * d)
    output = 2 * d * vocab
    return 3 * (encoder + decoder + output)


def step_fn(model, src, prev, target, opt, autocast):
    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss, _ = label_smoothed_nll(model(src, prev), target, 0.1, PAD)
        loss.backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[6, 18])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/train_throughput.json"))
    ap.add_argument("--peak-tflops", type=float, default=800.0,
                    help="The GPU's measured dense bf16 matmul rate, for model FLOPs utilisation (H100: ~800)")
    ap.add_argument("--compile", action="store_true", help="torch.compile both models")
    ap.add_argument("--profile", action="store_true", help="profile five steps of lnrepro's model")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (args.batch, args.length), generator=g).to(device)
    tgt = torch.randint(4, VOCAB, (args.batch, args.length), generator=g).to(device)
    prev = torch.cat([torch.full_like(tgt[:, :1], 2), tgt[:, :-1]], dim=1)
    tokens = tgt.numel()
    rows = []
    for layers in args.layers:
        row = {"layers": f"{layers}L-{layers}L", "target_tokens": tokens}
        for name, build in (("lnrepro", lambda: EncoderDecoder(VARIANTS["post_ln"], VOCAB, PAD, 512, 2048, 8, layers, layers, 0.1)),
                            ("torch", lambda: TorchTransformer(layers))):
            torch.manual_seed(0)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            model = build().to(device).train()
            opt = make_optimizer(model.parameters(), 1e-4, (0.9, 0.98), 1e-8, 0.0)
            step = step_fn(torch.compile(model) if args.compile else model, src, prev, tgt, opt, autocast)
            t = median_time(step, warmup=3 if args.compile else 2, repeats=args.repeats)
            if args.profile and name == "lnrepro":
                print_profile(lambda: [step() for _ in range(5)], device)
            row[f"{name}_tokens_per_s"] = tokens / t
            row[f"{name}_peak_mb"] = (torch.cuda.max_memory_allocated() / 2 ** 20 if device.type == "cuda" else peak_rss_mb())
            del model, opt
        row["ratio"] = row["lnrepro_tokens_per_s"] / row["torch_tokens_per_s"]
        row["train_flops_per_target_token"] = train_flops_per_target_token(layers, layers, src_len=args.length,
                                                                           tgt_len=args.length)
        if device.type == "cuda":
            row["lnrepro_mfu"] = row["lnrepro_tokens_per_s"] * row["train_flops_per_target_token"] / (args.peak_tflops * 1e12)
        rows.append(row)
        print(f"{row['layers']:>8}: lnrepro {row['lnrepro_tokens_per_s']:8.0f} tok/s   torch {row['torch_tokens_per_s']:8.0f} tok/s"
              f"   ratio {row['ratio']:.2f}")
    write_json(args.out, {"machine": machine(), "batch": args.batch, "length": args.length, "compile": args.compile,
                          "rows": rows})


if __name__ == "__main__":
    main()
