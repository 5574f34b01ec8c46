"""fa3-run on the CPU against the float64 reference, over shapes, masks,
head dims, GQA and dtypes. Inputs are fresh N(0, 1) draws each run; the seed
is printed on failure (set FA3_TEST_SEED to replay one)."""

import itertools
import os
import zlib

import numpy as np
import pytest

from attention_case import Case

SEQ_LENS = (1, 17, 128, 1000)


def _cases():
    cases = []
    # Every (Sq, Sk) pair, causal and not, GQA 8:2, d = 64, f16.
    for sq, sk in itertools.product(SEQ_LENS, SEQ_LENS):
        for causal in (False, True):
            heavy = sq * sk >= 128 * 1000
            cases.append(Case(sq=sq, sk=sk, causal=causal, hq=4 if heavy else 8, hkv=1 if heavy else 2))
    # Every head dim in every dtype, causal with Sq != Sk, static and dynamic.
    for d, dtype in itertools.product((32, 64, 128, 256), ("f32", "f16", "bf16")):
        cases.append(Case(sq=130, sk=200, d=d, dtype=dtype, causal=True, b=2, dynamic=d != 128))
        cases.append(Case(sq=17, sk=17, d=d, dtype=dtype, hq=4, hkv=4))
    # Long sequences at the largest head dim.
    cases.append(Case(sq=1000, sk=1000, d=256, dtype="bf16", causal=True, hq=2, hkv=1))
    cases.append(Case(sq=1000, sk=128, d=128, dtype="f16", hq=2, hkv=2, dynamic=False))
    # Windows (local attention), with and without causal, Sq != Sk.
    cases += [
        Case(sq=300, sk=300, window=(32, 0), causal=True),
        Case(sq=200, sk=333, window=(16, 16)),
        Case(sq=333, sk=200, window=(-1, 8)),
        Case(sq=128, sk=1000, window=(100, -1), dtype="bf16"),
        Case(sq=1000, sk=17, window=(5, 3), dtype="f32", hq=2, hkv=1),
        Case(sq=64, sk=64, window=(0, 0), b=3),
    ]
    # Softcap (Gemma-style logit capping), with an explicit scale too.
    cases += [
        Case(sq=200, sk=300, softcap=30.0, causal=True),
        Case(sq=100, sk=100, softcap=2.0, scale=0.5, dtype="f32"),
        Case(sq=150, sk=90, softcap=5.0, dtype="bf16", window=(20, 20)),
    ]
    # MQA, MHA, Dv != D, several batches, a non-default scale.
    cases += [
        Case(sq=100, sk=120, hq=8, hkv=1, b=3),
        Case(sq=100, sk=120, hq=3, hkv=3, causal=True),
        Case(sq=77, sk=99, d=128, dv=64, dtype="bf16"),
        Case(sq=77, sk=99, d=64, dv=256, dtype="f32", causal=True),
        Case(sq=50, sk=60, scale=0.3, dtype="f32", dynamic=False),
    ]
    # Small tiles: many query and key blocks, ragged in both directions.
    cases += [
        Case(sq=100, sk=83, causal=True, block_m=16, block_n=32),
        Case(sq=37, sk=61, window=(7, 5), block_m=8, block_n=8, dtype="f32"),
        Case(sq=129, sk=129, d=128, block_m=128, block_n=128, dtype="bf16", causal=True),
    ]
    # Empty key sequences: every row sees nothing.
    cases.append(Case(sq=5, sk=0, dtype="f32"))
    # PackGQA (pack_gqa): the heads of a kv head share a tile; decode (Sq =
    # 1), ragged, causal with Sq != Sk (the mask reads each row's query as
    # row / G), windows, softcap, groups 2 to 16, Sk = 0.
    cases += [
        Case(sq=1, sk=1000, hq=32, hkv=8, d=128, dtype="bf16", pack_gqa=True),
        Case(sq=1, sk=300, hq=16, hkv=2, causal=True, pack_gqa=True),
        Case(sq=17, sk=1000, hq=16, hkv=1, causal=True, dtype="f32", pack_gqa=True),
        Case(sq=1000, sk=1000, hq=8, hkv=4, causal=True, pack_gqa=True, b=2),
        Case(sq=130, sk=77, hq=8, hkv=2, window=(20, 5), pack_gqa=True),
        Case(sq=90, sk=150, hq=12, hkv=3, softcap=10.0, causal=True, dtype="bf16", pack_gqa=True),
        Case(sq=37, sk=61, hq=8, hkv=2, block_m=16, block_n=32, causal=True, pack_gqa=True),
        Case(sq=5, sk=0, hq=8, hkv=2, dtype="f32", pack_gqa=True),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id() for c in CASES])
def test_attention_matches_reference(case, fa3_run, tmp_path):
    seed = int(os.environ.get("FA3_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    rng = np.random.default_rng(zlib.crc32(case.id().encode()) ^ seed)
    inputs, o, lse = case.run(fa3_run, tmp_path, rng)
    try:
        case.check(inputs, o, lse)
    except AssertionError as e:
        raise AssertionError(f"{e}\n(replay with FA3_TEST_SEED={seed})") from None
