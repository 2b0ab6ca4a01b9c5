"""Figure 5's measure of a trained model: how alike the outputs of its layers are (the mean cosine similarity
between every pair of layers of each stack). `lnrepro evaluate` records it; the figure and its claim read it."""

from __future__ import annotations


def layer_cosine_similarity(outputs: list, keep) -> list[list[float]]:
    """Mean over real positions of cos(h_i, h_j) between the outputs of layers i and j (Fig. 5)."""
    import torch.nn.functional as F
    hs = [F.normalize(h[keep], dim=-1) for h in outputs]
    return [[float((a * b).sum(-1).mean()) for b in hs] for a in hs]


def layer_similarities(model, valid, sentences: int = 64) -> dict:
    """Figure 5's data for one trained encoder-decoder: cosine similarity among the outputs of every pair of layers
    of each stack, on the first validation sentences."""
    import torch

    from repro.data.text import PAD
    from repro.train.tasks import to_device
    model.eval()
    batch = to_device(valid.collate(list(range(min(sentences, len(valid))))), next(model.parameters()).device)
    enc, dec = [], []
    with torch.no_grad():
        memory, mask = model.encode(batch["src"], layer_outputs=enc)
        model.decode(batch["prev"], memory, mask, layer_outputs=dec)
    return {"encoder": layer_cosine_similarity(enc, batch["src"].ne(PAD)),
            "decoder": layer_cosine_similarity(dec, batch["prev"].ne(PAD))}
