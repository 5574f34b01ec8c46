"""fa3-intra-wg-overlap on the CPU: a schedule with intra_wg_overlap rotates
the key loop (block j + 1's QKᵀ and softmax beside block j's PV), with the
same arithmetic op for op. So the rotated loop must give the unrotated
loop's O and LSE bit for bit, and both must meet the float64 reference's
bound; the cases cover the loop's edges: no key block at all, exactly one
(the rotated loop runs no iteration), two, ragged tails, causal and window
bounds that start past block 0, softcap and GQA."""

import dataclasses
import os
import zlib

import numpy as np
import pytest

from attention_case import Case
from fa3 import schedules


def _schedule(block_m, block_n, overlap):
    return schedules.schedule(block_m, block_n, consumer_wgs=1, intra_wg_overlap=overlap,
                              stages=1)


CASES = [
    Case(sq=5, sk=0, dtype="f32"),                        # no key block
    Case(sq=17, sk=17),                                   # one block
    Case(sq=64, sk=100, causal=True),                     # one or two blocks per tile
    Case(sq=130, sk=200, d=128, dtype="bf16", causal=True, b=2),
    Case(sq=300, sk=300, window=(32, 0), causal=True),    # lower bound past block 0
    Case(sq=200, sk=333, window=(16, 16), dtype="f32"),
    Case(sq=200, sk=300, softcap=30.0, causal=True),
    Case(sq=100, sk=83, causal=True, block_m=16, block_n=32),
    Case(sq=37, sk=61, window=(7, 5), block_m=8, block_n=8, dtype="f32"),
    Case(sq=1000, sk=1000, d=64, dtype="bf16", causal=True, hq=2, hkv=1),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id() for c in CASES])
def test_rotated_loop_gives_the_same_bits(case, fa3_run, tmp_path):
    seed = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    block_m, block_n = case.block_m or 64, case.block_n or 64
    results = {}
    for overlap in (False, True):
        variant = dataclasses.replace(case, schedule=_schedule(block_m, block_n, overlap),
                                      block_m=0, block_n=0)
        run_dir = tmp_path / f"overlap{int(overlap)}"
        run_dir.mkdir()
        rng = np.random.default_rng(zlib.crc32(case.id().encode()) ^ seed)
        results[overlap] = variant.run(fa3_run, run_dir, rng)
    (inputs, o, lse), (inputs1, o1, lse1) = results[False], results[True]
    for x, y in zip(inputs, inputs1):
        np.testing.assert_array_equal(x, y)
    try:
        np.testing.assert_array_equal(o1, o, "O differs with the rotated key loop")
        np.testing.assert_array_equal(lse1, lse, "LSE differs with the rotated key loop")
        case.check(inputs1, o1, lse1)
    except AssertionError as e:
        raise AssertionError(f"{e}\n(replay with FA3_TEST_SEED={seed})") from None
