"""A model of how well a forward grid's tiles are spread over the SMs: no
GPU, no fa3. Each tile costs its key blocks + 1 (the +1 for the prologue
and epilogue), in fa3-order-grid's order (the heads in groups whose K and V
fit the L2 budget (8 MiB up to 1024 keys, 32 MiB beyond), the longest query tile first, heads fastest); it prints
the makespan against the ideal (total cost / SMs) for

  greedy      the next tile to the first CTA that is free: what the GPU's
              block dispatch does for a non-persistent grid, and what fa3's
              persistent kernel does (its tiles come from an atomic
              counter, docs/Design.md, fa3-persistent-grid);
  serpentine  a fixed order, fa3's first persistent kernel (replaced by the
              counter because of what this model showed): round r of
              gridDim.x tiles, CTA c takes tile r * G + c (r even) or
              r * G + G - 1 - c (r odd).

  python3 bench/model_tile_schedule.py [--sms 132] [--group G]

`--group G` replaces fa3-order-grid's L2-sized head groups by groups of G
heads (e.g. G * query tiles per head a multiple of 2 * SMs, so that each
group is a whole number of serpentine round pairs).

docs/Performance.md quotes its output (2026-12-05).
"""
import argparse
import heapq


def ordered_tiles(batch, heads, seqlen, head_dim, block_m, group=None):
    """(head·batch, query tile) in fa3-order-grid's order for Sq = Sk, with
    `group` heads a group (default: fa3-order-grid's L2 rule)."""
    tiles_per_head = -(-seqlen // block_m)
    kv_bytes = seqlen * head_dim * 2 * 2
    budget = (8 << 20) if seqlen <= 1024 else (32 << 20)
    group = group or max(1, budget // kv_bytes)
    out = []
    for first in range(0, batch * heads, group):
        members = range(first, min(batch * heads, first + group))
        for x in range(tiles_per_head):
            out.extend((hb, tiles_per_head - 1 - x) for hb in members)
    return out


def cost(tile, causal, tiles_per_head, block_m, block_n):
    blocks = (tile[1] + 1) * block_m // block_n if causal else tiles_per_head * block_m // block_n
    return blocks + 1.0


def greedy(costs, sms):
    free = [0.0] * sms
    for c in costs:
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def serpentine(costs, sms):
    load = [0.0] * sms
    for r, start in enumerate(range(0, len(costs), sms)):
        for c in range(sms):
            i = start + (c if r % 2 == 0 else sms - 1 - c)
            if i < len(costs):
                load[c] += costs[i]
    return max(load)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--group", type=int, default=None, help="heads per group (default: the L2 rule)")
    args = ap.parse_args()
    print("| d | block_m | causal | B x H x S | greedy / ideal | serpentine / ideal |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d, block_m, block_n in ((64, 128, 128), (128, 128, 128)):
        for causal in (False, True):
            for s in (512, 1024, 2048, 4096, 8192):
                b, h = 16384 // s, 2048 // d
                tiles = ordered_tiles(b, h, s, d, block_m, args.group)
                n = -(-s // block_m)
                costs = [cost(t, causal, n, block_m, block_n) for t in tiles]
                ideal = sum(costs) / args.sms
                print(f"| {d} | {block_m} | {'yes' if causal else 'no'} | {b}x{h}x{s} | "
                      f"{ideal / greedy(costs, args.sms):.2f} | {ideal / serpentine(costs, args.sms):.2f} |")


if __name__ == "__main__":
    main()
