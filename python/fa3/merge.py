"""Merging partial attentions by their LSE (split-KV, ring/context-parallel
attention): attention over keys K = K_1 ∪ ... ∪ K_n equals the merge of the
attentions over each K_i,

    LSE = log Σ_i exp(LSE_i),    O = Σ_i exp(LSE_i - LSE) · O_i,

exactly (up to rounding). With torch tensors the merge is differentiable and
its gradient reaches each partial attention through both O_i and LSE_i; fa3's
backward takes the LSE's part as fa3.attention_grad's grad_lse, so a model
that merges fa3 attentions trains like one that runs the whole attention.
"""

import numpy as np


def merge_attention(outs, lses):
    """Merges partial attentions of the same queries over disjoint key sets.

    outs: sequence of O_i [batch, seqlen_q, num_heads, head_dim] (any float
    dtype); lses: the matching natural-log LSE_i [batch, num_heads, seqlen_q]
    (float32; -inf where a row saw no key of that part). Torch tensors or
    numpy arrays, all of one kind. Returns (out, lse): out in the dtype of
    outs[0], computed in float32 (float64 for float64 inputs); lse float32
    (or float64); rows that saw no key in any part get out = 0, lse = -inf.
    """
    if not isinstance(outs, (list, tuple)) or not isinstance(lses, (list, tuple)):
        raise TypeError("outs and lses must be lists (or tuples) of partial results")
    if len(outs) != len(lses) or not outs:
        raise ValueError(f"merge_attention needs one lse per out and at least one part, got "
                         f"{len(outs)} outs and {len(lses)} lses")
    first = outs[0]
    for i, (o, lse) in enumerate(zip(outs, lses)):
        if tuple(o.shape) != tuple(first.shape) or len(o.shape) != 4:
            raise ValueError(f"outs[{i}] has shape {tuple(o.shape)}; every part must be "
                             f"[batch, seqlen_q, num_heads, head_dim] like outs[0] {tuple(first.shape)}")
        b, sq, h, _ = o.shape
        if tuple(lse.shape) != (b, h, sq):
            raise ValueError(f"lses[{i}] has shape {tuple(lse.shape)}, expected {(b, h, sq)} "
                             "[batch, num_heads, seqlen_q]")
    if type(first).__module__.startswith("torch"):
        return _merge_torch(outs, lses)
    if all(isinstance(x, np.ndarray) for x in (*outs, *lses)):
        return _merge_numpy(outs, lses)
    raise TypeError("merge_attention takes torch tensors or numpy arrays (all of one kind)")


def _merge_torch(outs, lses):
    import torch

    wide = torch.float64 if outs[0].dtype == torch.float64 else torch.float32
    lse = torch.stack([x.to(wide) for x in lses])  # [n, B, H, Sq]
    m = lse.amax(0)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w = torch.exp(lse - m)  # exp(-inf) = 0 for parts a row did not see
    total = w.sum(0)
    seen = total > 0
    merged_lse = torch.where(seen, torch.log(torch.where(seen, total, torch.ones_like(total))) + m,
                             torch.full_like(total, float("-inf")))
    weights = w / torch.where(seen, total, torch.ones_like(total))  # [n, B, H, Sq]
    out = sum(weights[i].transpose(1, 2).unsqueeze(-1) * outs[i].to(wide) for i in range(len(outs)))
    return out.to(outs[0].dtype), merged_lse


def _merge_numpy(outs, lses):
    wide = np.float64 if outs[0].dtype == np.float64 else np.float32
    lse = np.stack([np.asarray(x, dtype=wide) for x in lses])
    m = lse.max(0)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lse - m)
    total = w.sum(0)
    seen = total > 0
    merged_lse = np.where(seen, np.log(np.where(seen, total, 1.0)) + m, -np.inf).astype(wide)
    weights = w / np.where(seen, total, 1.0)
    out = sum(weights[i].transpose(0, 2, 1)[..., None] * np.asarray(outs[i], dtype=wide) for i in range(len(outs)))
    return out.astype(outs[0].dtype), merged_lse
