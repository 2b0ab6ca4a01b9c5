"""Figures 3, 4 and 7: gradient norms through the layers (section 3 of the paper).

Figure 3: the gradient norm of each layer's output hidden states, encoder and decoder, for Post-LN, Pre-LN and
B2T at 18L-18L (d 512), at initialisation or after N updates, on a batch of prepared WMT data when there is one,
else on generated token sequences. Figures 4/7: the norms at the labelled points inside one Post-LN decoder layer
(18th; 1st and 9th), showing the drop across each LayerNorm.
"""

from __future__ import annotations

from pathlib import Path

import torch

from repro.data.text import EOS, PAD
from repro.figures.output import save_figure
from repro.model.seq2seq import EncoderDecoder
from repro.model.variants import VARIANTS
from repro.progress import console, progress_bar
from repro.train.optim import inverse_sqrt_lr, label_smoothed_nll

FIG3_VARIANTS = ("post_ln", "pre_ln", "b2t")


def analysis_batch(root: Path | None, vocab: int, seed: int = 1, n: int = 32, length: int = 24) -> dict:
    """A training batch of prepared WMT En-De when it exists, else random token sequences (no download)."""
    corpus = Path(root) / "wmt16_ende" if root else None
    if corpus is not None and (corpus / "meta.json").is_file():
        from repro.data.batching import ParallelData
        data = ParallelData(corpus, "train")
        b = data.collate(list(range(min(n, len(data)))))
        b["source"] = f"{corpus} (first {n} training pairs)"
        return b
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (n, length), generator=g)
    tgt = torch.randint(4, vocab, (n, length), generator=g)
    src[:, -1] = EOS
    prev = torch.cat([torch.full((n, 1), EOS), tgt[:, :-1]], dim=1)
    return {"src": src, "prev": prev, "target": tgt, "ntokens": n * length, "source": "generated tokens"}


def gradient_norms(variant: str, layers: int, d_model: int, batch: dict, vocab: int, updates: int = 0,
                   seed: int = 1, probe_layer: int | None = None) -> dict:
    """Per-layer output gradient norms (bottom first); optionally the probe points of one decoder layer."""
    torch.manual_seed(seed)
    model = EncoderDecoder(VARIANTS[variant], vocab, PAD, d_model, 4 * d_model, 8, layers, layers, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    for step in range(updates):  # optional: look after N updates instead of at initialisation
        for g in opt.param_groups:
            g["lr"] = inverse_sqrt_lr(step, 1e-3, 4000, 1e-7)
        opt.zero_grad()
        loss, _ = label_smoothed_nll(model(batch["src"], batch["prev"]), batch["target"], 0.1, PAD)
        (loss / batch["ntokens"]).backward()
        opt.step()
    model.zero_grad()
    enc_out, dec_out = [], []
    if probe_layer is not None:
        model.decoder.layers[probe_layer].probe = []
    memory, mask = model.encode(batch["src"], layer_outputs=enc_out)
    logits = model.decode(batch["prev"], memory, mask, layer_outputs=dec_out)
    for h in enc_out + dec_out:
        h.retain_grad()
    loss, _ = label_smoothed_nll(logits, batch["target"], 0.1, PAD)
    (loss / batch["ntokens"]).backward()
    out = {"encoder": [h.grad.norm().item() for h in enc_out], "decoder": [h.grad.norm().item() for h in dec_out]}
    if probe_layer is not None:
        out["probe"] = [(name, t.grad.norm().item()) for name, t in model.decoder.layers[probe_layer].probe]
    return out


def figure_gradients(number: int, out: Path, json_path: Path | None, layers: int, d_model: int, updates: int,
                     root: Path | None) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    vocab = 32000 if d_model >= 512 else 1000
    batch = analysis_batch(root, vocab)
    when = "at initialisation" if updates == 0 else f"after {updates} updates"
    if number == 3:
        result = {}
        with progress_bar(f"figure 3 ({layers}L-{layers}L)", len(FIG3_VARIANTS)) as bar:
            for v in FIG3_VARIANTS:
                result[v] = gradient_norms(v, layers, d_model, batch, vocab, updates)
                bar.advance()
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, side in zip(axes, ("encoder", "decoder")):
            for v in FIG3_VARIANTS:
                ys = result[v][side]
                ax.plot(range(1, len(ys) + 1), ys, marker="o", markersize=3, label=VARIANTS[v].title)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers
            ax.set_xlabel("layer (bottom to top)")
            ax.set_ylabel("gradient norm of layer output")
            ax.set_title(f"({'a' if side == 'encoder' else 'b'}) {side}")
            ax.legend()
        fig.suptitle(f"Figure 3: gradient norms, {layers}L-{layers}L, d={d_model}, {when} ({batch['source']})",
                     fontsize=9)
    else:
        targets = {4: [layers - 1], 7: [0, layers // 2 - 1]}[number]
        result = {}
        for idx in targets:
            probe = gradient_norms("post_ln", layers, d_model, batch, vocab, updates, probe_layer=idx)["probe"]
            result[f"decoder layer {idx + 1}"] = probe
        fig, axes = plt.subplots(1, len(targets), figsize=(6 * len(targets), 4), squeeze=False)
        for ax, (name, probe) in zip(axes[0], result.items()):
            labels = [p[0] for p in probe]
            ax.bar(range(len(probe)), [p[1] for p in probe],
                   color=["tab:red" if "LN" in l else "tab:blue" for l in labels])
            ax.set_xticks(range(len(probe)), labels, rotation=30, ha="right", fontsize=8)
            ax.set_ylabel("gradient norm")
            ax.set_title(f"Post-LN {name} of {layers}")
            from matplotlib.patches import Patch
            ax.legend(handles=[Patch(color="tab:blue", label="residual sum (before a LayerNorm)"),
                               Patch(color="tab:red", label="just after a LayerNorm")], fontsize=8)
        fig.suptitle(f"Figure {number}: gradient norms inside a Post-LN decoder layer ({when})", fontsize=9)
        result = {k: dict(v) for k, v in result.items()}
    fig.tight_layout()
    save_figure(fig, out, json_path, result)
    if number == 3:
        for v in FIG3_VARIANTS:
            dec = result[v]["decoder"]
            console.print(f"{VARIANTS[v].title:>15}: decoder top/bottom gradient-norm ratio {dec[-1] / dec[0]:.2f}")
    return result
