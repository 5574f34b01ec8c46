"""Context-parallel attention for torch.distributed: a long sequence split
across ranks, each rank computing the attention of its query shard against
the key/value shards of all ranks, merged exactly by their LSE
(fa3.merge_attention), differentiable end to end.

Layout. The sequence is cut into chunks of equal length. Without zig-zag,
rank r holds chunk r of W. With zig-zag (the default for causal attention,
for load balance) it holds chunks r and 2W - 1 - r of 2W: under a causal
mask early chunks attend to few keys and late ones to many, and pairing
them gives every rank the same work. `zigzag_shard` / `zigzag_unshard`
convert between a full tensor and the shards.

Communication. `context_parallel_attention` all-gathers K and V with
`torch.distributed.nn.functional.all_gather`, which is differentiable (its
backward reduce-scatters dK and dV to their owners). Each pair of a local
query chunk and a key chunk is one fa3.attention call returning its LSE:
key chunks before the query chunk are fully visible, the diagonal chunk is
causal, later ones are skipped. The partial results merge by their LSE, and
the LSE's gradient flows back into each partial attention
(fa3.attention_grad's grad_lse), so the sharded attention's gradients are the
whole attention's. `attention_gathered` is the same computation on shards
the caller gathered itself (another communication scheme, or all ranks
simulated in one process, as the tests do).
"""

from .api import attention
from .merge import merge_attention


def _chunk_ids(rank, world_size, zigzag):
    return (rank, 2 * world_size - 1 - rank) if zigzag else (rank,)


def zigzag_shard(x, world_size, rank, zigzag=True, dim=1):
    """Rank `rank`'s shard of the full tensor `x` along `dim` (the sequence):
    chunks (rank, 2W - 1 - rank) of 2W, concatenated, or chunk `rank` of W
    without zig-zag. The length must divide evenly."""
    import torch

    parts = 2 * world_size if zigzag else world_size
    if x.shape[dim] % parts:
        raise ValueError(f"sequence length {x.shape[dim]} is not a multiple of {parts} "
                         f"({'2 x ' if zigzag else ''}world_size {world_size} chunks)")
    chunks = x.chunk(parts, dim=dim)
    return torch.cat([chunks[c] for c in _chunk_ids(rank, world_size, zigzag)], dim=dim)


def zigzag_unshard(shards, zigzag=True, dim=1):
    """The full tensor from every rank's shard (the inverse of zigzag_shard)."""
    import torch

    world_size = len(shards)
    per = 2 if zigzag else 1
    chunks = [None] * (per * world_size)
    for rank, shard in enumerate(shards):
        for c, piece in zip(_chunk_ids(rank, world_size, zigzag), shard.chunk(per, dim=dim)):
            chunks[c] = piece
    return torch.cat(chunks, dim=dim)


def attention_gathered(q, k_shards, v_shards, rank, causal=False, softmax_scale=None, zigzag=None,
                       return_lse=False):
    """This rank's attention over gathered key/value shards: `q` is the
    rank's query shard [B, S_local, Hq, D], `k_shards`/`v_shards` every
    rank's key/value shard in rank order (what an all-gather returns).
    `zigzag` defaults to `causal`. Returns the rank's output shard (and its
    LSE [B, Hq, S_local])."""
    world_size = len(k_shards)
    zigzag = causal if zigzag is None else zigzag
    if len(v_shards) != world_size or not 0 <= rank < world_size:
        raise ValueError(f"need one k and one v shard per rank and 0 <= rank < {world_size}, got "
                         f"{len(k_shards)} k, {len(v_shards)} v shards and rank {rank}")
    per = 2 if zigzag else 1
    import torch

    k_chunks, v_chunks = {}, {}
    for j in range(world_size):
        for c, kc, vc in zip(_chunk_ids(j, world_size, zigzag), k_shards[j].chunk(per, dim=1),
                             v_shards[j].chunk(per, dim=1)):
            k_chunks[c], v_chunks[c] = kc, vc
    outs, lses = [], []
    for cq, qc in zip(_chunk_ids(rank, world_size, zigzag), q.chunk(per, dim=1)):
        parts = []
        for ck in sorted(k_chunks):
            if causal and ck > cq:
                continue  # entirely in the future of this query chunk
            # Chunks are of one length, so the diagonal chunk's causal mask
            # is fa3's (bottom-right aligned = top-left for a square block).
            parts.append(attention(qc, k_chunks[ck], v_chunks[ck], causal=causal and ck == cq,
                                   softmax_scale=softmax_scale, return_lse=True))
        o, lse = merge_attention([p[0] for p in parts], [p[1] for p in parts])
        outs.append(o)
        lses.append(lse)
    out, lse = torch.cat(outs, dim=1), torch.cat(lses, dim=2)
    return (out, lse) if return_lse else out


def context_parallel_attention(q, k, v, causal=False, softmax_scale=None, group=None, zigzag=None,
                               return_lse=False):
    """Attention of a sequence sharded across the ranks of `group` (default:
    the world): q, k, v are this rank's shards ([B, S_local, H, D], laid out
    by `zigzag_shard`), the result this rank's output shard. K and V are
    all-gathered (differentiably); see the module docstring."""
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_gather

    rank = dist.get_rank(group)
    k_shards = all_gather(k.contiguous(), group=group or dist.group.WORLD)
    v_shards = all_gather(v.contiguous(), group=group or dist.group.WORLD)
    return attention_gathered(q, list(k_shards), list(v_shards), rank, causal=causal,
                              softmax_scale=softmax_scale, zigzag=zigzag, return_lse=return_lse)


__all__ = ["context_parallel_attention", "attention_gathered", "zigzag_shard", "zigzag_unshard"]
