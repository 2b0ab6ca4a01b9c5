"""Batched beam search with the incremental decoding cache (fairseq's SequenceGenerator, simplified).

Finished hypotheses are ranked by score / length^lenpen, length counting the final </s>; </s> cannot come first
(fairseq's min_len 1). Each step takes the top
2*beam candidates; as in fairseq (`sequence_generator.py`: `eos_mask[:, :beam_size]`), an end-of-sentence is
finalised only when it ranks among the top `beam` candidates, lower-ranked ones are dropped, and the first `beam`
candidates that are not end-of-sentence continue. A sentence stops once it has `beam` finished hypotheses, or at
its maximum length.
"""

from __future__ import annotations

import torch

from repro.data.text import EOS, PAD

MIN_LEN = 1  # fairseq SequenceGenerator's default min_len: </s> is barred at the first step


@torch.no_grad()
def beam_search(model, src: torch.Tensor, beam: int, max_len: torch.Tensor, lenpen: float = 1.0,
                src_lengths: torch.Tensor | None = None, use_cache: bool = True,
                with_scores: bool = False) -> list[list[int]]:
    """src (B, S) token ids or features; max_len (B,) maximum output tokens. Returns the best tokens per row (without
    the final </s>); `with_scores`: (score, tokens) pairs, the score the log-probability over length^lenpen."""
    model.eval()
    bsz = src.size(0)
    device = src.device
    memory, mask = model.encode(src, src_lengths)
    order = torch.arange(bsz, device=device).repeat_interleave(beam)
    memory, mask = memory.index_select(0, order), mask.index_select(0, order)
    cache = model.new_cache() if use_cache else None
    tokens = torch.full((bsz * beam, 1), EOS, dtype=torch.long, device=device)
    scores = torch.zeros(bsz, beam, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(bsz)]
    # The per-sentence bookkeeping runs on the host, moved to the device once per step: on a GPU, element writes and
    # reads of device tensors inside the loop over sentences would each launch a kernel or wait for the device.
    done = [False] * bsz
    max_len_l = max_len.tolist()
    limit = int(max(max_len_l))
    for t in range(limit + 1):
        inp = tokens[:, -1:] if use_cache else tokens
        lprobs = next_log_probs(model.decode(inp, memory, mask, cache=cache)[:, -1], t, max_len, beam)
        vocab = lprobs.size(-1)
        cand = (scores.view(-1, 1) + lprobs).view(bsz, beam * vocab)
        top_scores, top_idx = cand.topk(2 * beam, dim=1)
        beam_idx, tok_idx = top_idx // vocab, top_idx % vocab
        new_scores = [[float("-inf")] * beam for _ in range(bsz)]
        new_src = [[0] * beam for _ in range(bsz)]
        new_tok = [[EOS] * beam for _ in range(bsz)]
        top_scores_l, beam_l, tok_l = top_scores.tolist(), beam_idx.tolist(), tok_idx.tolist()
        prefixes = Prefixes(tokens)
        for b in range(bsz):
            if done[b]:
                continue
            kept = advance(zip(top_scores_l[b], beam_l[b], tok_l[b]), beam, finished[b],
                           lambda bi, b=b: prefixes[b * beam + bi], lenpen)
            for k, (s, bi, ti) in enumerate(kept):
                new_scores[b][k], new_src[b][k], new_tok[b][k] = s, bi, ti
            # fairseq's stopping rule: once `beam` hypotheses have finished, the sentence is done
            done[b] = len(finished[b]) >= beam or t >= max_len_l[b]
        if all(done):
            break
        for b in range(bsz):
            if done[b]:
                new_scores[b] = [float("-inf")] * beam
        new_src_t = torch.tensor(new_src, dtype=torch.long).to(device, non_blocking=True)
        reorder = (torch.arange(bsz, device=device).unsqueeze(1) * beam + new_src_t).view(-1)
        new_tok_t = torch.tensor(new_tok, dtype=torch.long).to(device, non_blocking=True)
        tokens = torch.cat([tokens.index_select(0, reorder), new_tok_t.view(-1, 1)], dim=1)
        scores = torch.tensor(new_scores).to(device, non_blocking=True)
        if cache is not None:
            model.reorder_cache(cache, reorder)
    out = []
    for b in range(bsz):
        if not finished[b]:
            out.append((float("-inf"), []) if with_scores else [])
            continue
        best = max(finished[b], key=lambda x: x[0])
        out.append(best if with_scores else best[1])
    return out


def next_log_probs(logits: torch.Tensor, t: int, max_len: torch.Tensor, beam: int) -> torch.Tensor:
    """The log-probabilities of step `t`'s next tokens: never padding, no end of sentence before MIN_LEN, and at a
    hypothesis's maximum length every word but </s> barred, </s> keeping its log-probability, which counts in the
    score (fairseq's sequence_generator.py)."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    lprobs[:, PAD] = float("-inf")
    if t < MIN_LEN:  # fairseq's min_len (1): no empty hypothesis
        lprobs[:, EOS] = float("-inf")
    force_eos = (t >= max_len).repeat_interleave(beam)
    eos = lprobs[:, EOS].clone()
    lprobs[force_eos] = float("-inf")
    lprobs[:, EOS] = torch.where(force_eos, eos, lprobs[:, EOS])
    return lprobs


class Prefixes:
    """The hypotheses' tokens so far, fetched from the device once in a step, when one first finishes."""

    def __init__(self, tokens: torch.Tensor):
        self.tokens, self.rows = tokens, None

    def __getitem__(self, row: int) -> list[int]:
        if self.rows is None:
            self.rows = self.tokens[:, 1:].tolist()
        return self.rows[row]


def advance(candidates, beam: int, finished: list, prefix, lenpen: float) -> list[tuple[float, int, int]]:
    """One sentence's step: of its candidates (score, beam, token), best first, the `beam` that continue. Only an
    end of sentence among the top `beam` candidates finishes its hypothesis (fairseq), into `finished`, scored over
    its length ** lenpen; `prefix(bi)` is beam bi's tokens so far."""
    kept = []
    for rank, (s, bi, ti) in enumerate(candidates):
        if s == float("-inf"):
            break
        if ti == EOS:
            if rank < beam and len(finished) < beam:
                hyp = prefix(bi)
                finished.append((s / (len(hyp) + 1) ** lenpen, hyp))
        elif len(kept) < beam:
            kept.append((s, bi, ti))
        if len(kept) == beam and (rank >= beam - 1 or len(finished) >= beam):
            break
    return kept
