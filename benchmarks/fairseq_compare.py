"""CPU training throughput side by side: fairseq 0.12.2, torch.nn.Transformer and lnrepro, same model and batch;
with --decode, beam search: fairseq's SequenceGenerator against lnrepro's beam_search.

    bash benchmarks/fairseq_env.sh .fairseq-env /path/to/python3.10      # once: fairseq's own environment
    PYTHONPATH=benchmarks:. python benchmarks/fairseq_compare.py --fairseq-python .fairseq-env/bin/python \
        [--configs 6:2 18:2 6:1] [--rounds 2] [--steps 3] [--with-lnrepro-old-torch]
    PYTHONPATH=benchmarks:. python benchmarks/fairseq_compare.py --decode --configs 6:1 6:2 [--sentences 128]

Post-LN encoder-decoder, d 512, FFN 2,048, 8 heads, dropout 0.1, shared embeddings, vocabulary 8,000, fp32; one
step = forward, label-smoothed (0.1) loss summed over 64 x 32 = 2,048 target tokens, backward, torch's Adam.
fairseq builds its own `TransformerModel` (transformer_wmt_en_de architecture, share_all_embeddings) and uses its
own criterion function (label_smoothed_nll_loss); lnrepro trains as `lnrepro train` does on a CPU (its CPU paths,
repro/model/cpu_paths.py). Each (implementation, layers, threads) runs in its own process; the driver interleaves
them, round after round, and reports target tokens/s from the median step after one warm-up step.
`--with-lnrepro-old-torch` also runs lnrepro's model under the fairseq environment's torch 2.4.1.

Decoding (--decode): the same model built by each implementation, untrained, vocabulary 32,000, eval mode; beam 4
over `--sentences` sources of 30 tokens. End of sentence is blocked until the limit of 50 output tokens (fairseq:
min_len; lnrepro: decode_speed.py's NoEarlyEos), so every hypothesis is 50 tokens plus </s> in both and the work is
the same; both decode with their incremental caches. Sentences/s of the median of `--steps` timed calls after one
warm-up call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VOCAB, PAD, BATCH, LENGTH = 8000, 1, 64, 32
DECODE_VOCAB, SRC_LEN, OUT_LEN, BEAM = 32000, 30, 50, 4
REPO = Path(__file__).resolve().parents[1]


def build(impl: str, layers: int, vocab_size: int = VOCAB):
    if impl == "fairseq":
        from fairseq.data import Dictionary
        from fairseq.models.transformer import TransformerModel, transformer_wmt_en_de
        vocab = Dictionary()  # bos 0, pad 1, eos 2, unk 3, as lnrepro's
        for i in range(vocab_size - len(vocab)):
            vocab.add_symbol(f"w{i}")
        args = argparse.Namespace(encoder_layers=layers, decoder_layers=layers, share_all_embeddings=True,
                                  dropout=0.1, max_source_positions=1024, max_target_positions=1024)
        transformer_wmt_en_de(args)
        return TransformerModel.build_model(args, argparse.Namespace(source_dictionary=vocab, target_dictionary=vocab))
    if impl == "torch":
        from train_throughput import TorchTransformer
        return TorchTransformer(layers, vocab=vocab_size)
    from repro.model.seq2seq import EncoderDecoder
    from repro.model.variants import VARIANTS
    return EncoderDecoder(VARIANTS["post_ln"], vocab_size, PAD, 512, 2048, 8, layers, layers, 0.1)


def measure(impl: str, layers: int, threads: int, steps: int) -> dict:
    import torch
    torch.set_num_threads(threads)
    if impl == "lnrepro":
        from common import choose_paths
        choose_paths(plain=False)  # as training on a CPU does
    torch.manual_seed(0)
    model = build(impl, layers).train()
    if impl == "lnrepro":  # its Adam as training makes it (fused on a CPU)
        from repro.train.optim import make_optimizer
        opt = make_optimizer(model.parameters(), 1e-4, (0.9, 0.98), 1e-8, 0.0)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g)
    tgt = torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g)
    prev = torch.cat([torch.full_like(tgt[:, :1], 2), tgt[:, :-1]], dim=1)
    if impl == "fairseq":
        from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
        lengths = torch.full((BATCH,), LENGTH)

        def loss_fn():
            out = model(src, lengths, prev)
            lprobs = model.get_normalized_probs(out, log_probs=True)
            return label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), tgt.view(-1), 0.1, ignore_index=PAD)[0]
    else:
        from repro.train.optim import label_smoothed_nll
        from repro.train.output_loss import smoothed_nll

        def loss_fn():
            if impl == "lnrepro":  # as batch_loss: the loss takes the output projection's place
                return model(src, prev, output=smoothed_nll(tgt, 0.1, PAD))[0]
            return label_smoothed_nll(model(src, prev), tgt, 0.1, PAD)[0]

    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        if i:  # the first step warms up
            times.append(time.perf_counter() - t0)
    return {"impl": impl, "torch": torch.__version__, "layers": layers, "threads": threads,
            # trained parameters (fairseq 0.12.2's encoder layers also hold unused copies for its inference path)
            "parameters": sum(p.numel() for p in model.parameters() if p.grad is not None),
            "tokens_per_s": BATCH * LENGTH / statistics.median(times), "step_s": times}


def measure_decode(impl: str, layers: int, threads: int, steps: int, sentences: int) -> dict:
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # fp32 on either
    model = build(impl, layers, DECODE_VOCAB).to(device).eval()
    src = torch.randint(4, DECODE_VOCAB, (sentences, SRC_LEN), generator=torch.Generator().manual_seed(0)).to(device)
    if impl == "fairseq":
        from fairseq.sequence_generator import SequenceGenerator
        gen = SequenceGenerator([model], model.decoder.dictionary, beam_size=BEAM, max_len_a=0, max_len_b=OUT_LEN,
                                min_len=OUT_LEN)

        def decode(rows):
            lengths = torch.full((rows,), SRC_LEN, device=device)
            sample = {"net_input": {"src_tokens": src[:rows], "src_lengths": lengths}}
            with torch.no_grad():
                return [hyps[0]["tokens"].numel() for hyps in gen.generate([model], sample)]
    else:
        from common import choose_paths
        from decode_speed import NoEarlyEos
        from repro.eval.generate import beam_search
        choose_paths(plain=False, device=device)  # as evaluation does
        wrapped = NoEarlyEos(model)

        def decode(rows):
            limit = torch.full((rows,), OUT_LEN, device=device)
            with torch.no_grad():
                return [len(h) + 1 for h in beam_search(wrapped, src[:rows], BEAM, limit)]

    decode(4)  # warm-up
    times, lengths = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        lengths = decode(sentences)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    assert set(lengths) == {OUT_LEN + 1}, f"{impl}: output lengths {sorted(set(lengths))}, not {OUT_LEN} + </s>"
    return {"impl": impl, "torch": torch.__version__, "layers": layers, "threads": threads, "sentences": sentences,
            "sentences_per_s": sentences / statistics.median(times), "call_s": times}


def drive(args) -> None:
    impls = [("fairseq", args.fairseq_python), ("torch", sys.executable), ("lnrepro", sys.executable)]
    if args.decode:  # torch.nn.Transformer has no incremental decoder to compare
        impls = [impls[0], impls[2]]
    if args.with_lnrepro_old_torch:
        impls.append(("lnrepro", args.fairseq_python))
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'benchmarks'}:{REPO}")
    rows = []
    for rnd in range(1, args.rounds + 1):
        for config in args.configs:
            layers, threads = (int(x) for x in config.split(":"))
            for impl, python in impls:
                cmd = [python, __file__, "--impl", impl, "--layers", str(layers), "--threads", str(threads),
                       "--steps", str(args.steps)] + (["--decode", "--sentences", str(args.sentences)] if args.decode
                                                       else [])
                out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
                row = json.loads(out.stdout.strip().splitlines()[-1]) | {"round": rnd}
                rows.append(row)
                rate = (f"{row['sentences_per_s']:6.2f} sentences/s" if args.decode else
                        f"{row['tokens_per_s']:6.0f} target tokens/s, {row['parameters']:,} parameters")
                print(f"round {rnd} {layers}L-{layers}L {threads} thread(s) {impl:>8} (torch {row['torch']}): {rate}",
                      flush=True)
    from common import machine, write_json
    setup = ({"decode": {"vocab": DECODE_VOCAB, "beam": BEAM, "sentences": args.sentences, "source": SRC_LEN,
                         "output": OUT_LEN}} if args.decode else {"batch": [BATCH, LENGTH], "vocab": VOCAB})
    where = "gpu" if args.decode and machine().get("device") else "cpu"  # training is measured on the CPU only
    out = args.out or Path(f"benchmarks/results/fairseq_compare{'_decode' if args.decode else ''}_{where}.json")
    write_json(out, {"machine": machine(), "date": time.strftime("%Y-%m-%d"), **setup, "rows": rows})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["fairseq", "torch", "lnrepro"], help="measure one, in this process")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=["6:2", "18:2", "6:1"], help="LAYERS:THREADS")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fairseq-python", default=".fairseq-env/bin/python")
    ap.add_argument("--with-lnrepro-old-torch", action="store_true")
    ap.add_argument("--decode", action="store_true", help="beam search instead of training steps")
    ap.add_argument("--sentences", type=int, default=128, help="with --decode: sources per call")
    ap.add_argument("--out", type=Path, help="default benchmarks/results/fairseq_compare[_decode]_{cpu,gpu}.json")
    args = ap.parse_args()
    if args.impl and args.decode:
        print(json.dumps(measure_decode(args.impl, args.layers, args.threads, args.steps, args.sentences)))
    elif args.impl:
        print(json.dumps(measure(args.impl, args.layers, args.threads, args.steps)))
    else:
        drive(args)


if __name__ == "__main__":
    main()
