"""Training throughput: lnrepro's encoder-decoder against torch.nn.Transformer, same sizes, batch, loss, optimizer.

    python benchmarks/train_throughput.py [--layers 6 18] [--batch 32 --length 30] [--out benchmarks/results/train.json]
                                          [--compile] [--profile]
    python benchmarks/train_throughput.py --lm [--layers 16] [--batch 1 --length 3072]

Target tokens per second = target tokens in the batch / median step time (forward, backward, Adam step) after
warm-up. Both models: d 512, FFN 2048, 8 heads, dropout 0.1, shared embeddings, Post-LN, fp32 on CPU (bf16
autocast on a GPU). Both use the optimizer training uses (repro/train/optim.py: Adam, fused on a GPU). --compile
wraps both models in torch.compile (as train.compile does); --profile prints the top operators of torch's
profiler over five steps of lnrepro's model (self device time on a GPU, self CPU time otherwise).

--lm measures the WikiText-103 language model instead (recipes/base/wikitext103.yaml at paper scale: d 1024, FFN
4096, 8 heads, adaptive input and softmax with cutoffs 20,000 / 60,000 and factor 4 over the 267,744-word
vocabulary, dropout 0.3), Post-LN, on one block of `--length` tokens per sequence; no second implementation. Its
tokens are drawn from a Zipf distribution over the vocabulary (p ~ 1 / rank), so the adaptive softmax's bands see
about the share of tokens a real corpus gives them (head about 80%).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from common import machine, median_time, peak_rss_mb, print_profile, write_json
from repro.model.lm import LanguageModel
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import VARIANTS
from repro.train.optim import label_smoothed_nll, make_optimizer

VOCAB, PAD = 32000, 1
LM_VOCAB, LM_CUTOFFS, LM_FACTOR, LM_D, LM_FFN = 267744, (20000, 60000), 4, 1024, 4096


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


def lm_train_flops_per_token(layers: int, tokens: torch.Tensor, d: int = LM_D, ffn: int = LM_FFN) -> float:
    """Model FLOPs of one LM training step per token (3 x forward, a multiply-add is 2): per layer 2 (4d^2 + 2 d ffn)
    weights and 2 * 2 T d for the attention scores and sums over the block of T tokens (full square counted); the
    adaptive softmax's head 2 d (20,000 + 2); for the share of tokens whose target lies in tail band i, its
    projection and words, 2 (d d_i + d_i |band i|) with d_i = d / 4^i. The adaptive input is not counted."""
    edges = [0, *LM_CUTOFFS, LM_VOCAB]
    per_token = layers * (2 * (4 * d * d + 2 * d * ffn) + 4 * tokens.size(1) * d) + 2 * d * (edges[1] + 2)
    for i in (1, 2):
        share = float(((tokens >= edges[i]) & (tokens < edges[i + 1])).float().mean())
        d_i = d // LM_FACTOR ** i
        per_token += share * 2 * (d * d_i + d_i * (edges[i + 1] - edges[i]))
    return 3 * per_token


def zipf_tokens(shape: tuple, generator: torch.Generator) -> torch.Tensor:
    rank = torch.arange(1, LM_VOCAB - 3, dtype=torch.float64)
    draw = torch.multinomial((1 / rank).float(), shape[0] * shape[1], replacement=True, generator=generator)
    return (draw + 4).view(shape)


def lm_main(args, device, autocast):
    g = torch.Generator().manual_seed(0)
    stream = zipf_tokens((args.batch, args.length + 1), g).to(device)
    tokens, target = stream[:, :-1], stream[:, 1:]
    rows = []
    for layers in args.layers:
        torch.manual_seed(0)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        model = LanguageModel(VARIANTS["post_ln"], LM_VOCAB, PAD, LM_D, LM_FFN, 8, layers, 0.3, 0.1, 0.1,
                              list(LM_CUTOFFS), LM_FACTOR).to(device).train()
        opt = make_optimizer(model.parameters(), 1e-4, (0.9, 0.98), 1e-8, 0.0)
        run = torch.compile(model, mode=args.compile_mode) if args.compile else model

        def step():
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = -run(tokens, target).sum()
            loss.backward()
            opt.step()
        t = median_time(step, warmup=3 if args.compile else 2, repeats=args.repeats)
        if args.profile:
            print_profile(lambda: [step() for _ in range(5)], device)
        row = {"layers": f"{layers}L LM", "target_tokens": target.numel(), "lnrepro_tokens_per_s": target.numel() / t,
               "parameters": sum(p.numel() for p in model.parameters()),
               "train_flops_per_target_token": lm_train_flops_per_token(layers, tokens.cpu())}
        row["lnrepro_peak_mb"] = (torch.cuda.max_memory_allocated() / 2 ** 20 if device.type == "cuda" else peak_rss_mb())
        if device.type == "cuda":
            row["lnrepro_mfu"] = row["lnrepro_tokens_per_s"] * row["train_flops_per_target_token"] / (args.peak_tflops * 1e12)
        print(f"{row['layers']:>8}: lnrepro {row['lnrepro_tokens_per_s']:8.0f} tok/s  MFU {row.get('lnrepro_mfu', 0):.1%}"
              f"  peak {row['lnrepro_peak_mb']:.0f} MB")
        rows.append(row)
        del model, opt
    return rows


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
    ap.add_argument("--compile-mode", default=None, help="torch.compile's mode, e.g. reduce-overhead (CUDA graphs)")
    ap.add_argument("--profile", action="store_true", help="profile five steps of lnrepro's model")
    ap.add_argument("--lm", action="store_true", help="the WikiText-103 language model at paper scale instead")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    if args.lm:
        rows = lm_main(args, device, autocast)
        write_json(args.out, {"machine": machine(), "model": "lm", "batch": args.batch, "length": args.length,
                              "compile": args.compile, "rows": rows})
        return
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
            step = step_fn(torch.compile(model, mode=args.compile_mode) if args.compile else model, src, prev, tgt, opt, autocast)
            t = median_time(step, warmup=3 if args.compile else 2, repeats=args.repeats)
            if args.profile and name == "lnrepro":
                print_profile(lambda: [step() for _ in range(5)], device)
            row[f"{name}_tokens_per_s"] = tokens / t
            print(f"{layers}L-{layers}L {name}: {tokens / t:.0f} target tokens/s", flush=True)
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
                          "compile_mode": args.compile_mode, "rows": rows})


if __name__ == "__main__":
    main()
