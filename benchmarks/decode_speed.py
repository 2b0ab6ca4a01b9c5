"""Decoding: sentences per second of batched beam search (beam 4, 6L-6L base) with and without the cache.

    python benchmarks/decode_speed.py [--sentences 32 --out-len 50] [--plain] [--cached-only]

An untrained model emits arbitrary tokens; eos is masked until `--out-len` so every hypothesis is exactly that
long and both paths do the same work. On the CPU the model runs as evaluation runs it, with
repro/model/cpu_paths.py's paths; --plain uses torch's own layers and allocator settings instead.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from common import choose_paths, machine, peak_rss_mb, write_json
from repro.eval.generate import beam_search
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import VARIANTS


class NoEarlyEos(torch.nn.Module):
    """Wraps a model so that </s> cannot win before the length limit."""

    def __init__(self, model):
        super().__init__()
        self.m = model
        self.encode, self.new_cache, self.reorder_cache = model.encode, model.new_cache, model.reorder_cache

    def decode(self, *a, **k):
        logits = self.m.decode(*a, **k)
        logits[..., 2] = -1e9
        return logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=32)
    ap.add_argument("--src-len", type=int, default=30)
    ap.add_argument("--out-len", type=int, default=50)
    ap.add_argument("--plain", action="store_true", help="torch's own layers and allocator settings")
    ap.add_argument("--cached-only", action="store_true", help="skip the uncached decoder")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/decode_speed.json"))
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    paths = choose_paths(args.plain, device)
    torch.manual_seed(0)
    model = NoEarlyEos(EncoderDecoder(VARIANTS["post_ln"], 32000, 1, 512, 2048, 8, 6, 6, 0.0).to(device).eval())
    src = torch.randint(4, 32000, (args.sentences, args.src_len), device=device)
    max_len = torch.full((args.sentences,), args.out_len, device=device)
    beam_search(model, src[:8], 4, max_len[:8].clamp(max=5))  # warm-up: CUDA context, kernels, allocator
    result = {}
    for cached in (True,) if args.cached_only else (True, False):
        t0 = time.perf_counter()
        beam_search(model, src, 4, max_len, use_cache=cached)
        dt = time.perf_counter() - t0
        result["cached" if cached else "uncached"] = {"seconds": dt, "sentences_per_s": args.sentences / dt}
        print(f"{'cached' if cached else 'uncached':>9}: {args.sentences / dt:7.2f} sentences/s ({dt:.1f} s)")
    if "uncached" in result:
        result["speedup"] = result["cached"]["sentences_per_s"] / result["uncached"]["sentences_per_s"]
        print(f"speed-up of the cache: {result['speedup']:.2f}x")
    result["peak_mb"] = peak_rss_mb()
    result["paths"] = paths
    write_json(args.out, {"machine": machine(), "args": vars(args) | {"out": str(args.out)}, **result})


if __name__ == "__main__":
    main()
