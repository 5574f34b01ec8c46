"""fa3.schedules reads the compiler's cost model: its default forward
schedule is, field for field, what fa3-select-schedule (target sm_90a) writes
on a dynamic-length attention, and each A/B structure changes only its own
field."""

import re
import subprocess

import pytest

from fa3 import schedules


def _pass_schedule(fa3_opt, d):
    t = f"tensor<?x?x8x{d}xbf16>"
    lt = "tensor<?x8x?xf32>"
    source = (f"func.func @f(%q: {t}, %k: {t}, %v: {t}) -> ({t}, {lt}) {{\n"
              f"  %o, %lse = fa3.attention %q, %k, %v : ({t}, {t}, {t}) -> ({t}, {lt})\n"
              f"  return %o, %lse : {t}, {lt}\n}}\n")
    out = subprocess.run([fa3_opt, "--fa3-select-schedule=target=sm_90a"], input=source,
                         capture_output=True, text=True, check=True).stdout
    return re.search(r"#fa3\.schedule<[^>]*>", out).group(0)


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
def test_default_is_the_pass_choice(fa3_opt, d):
    assert schedules.hopper_forward(d) == _pass_schedule(fa3_opt, d)


def _fields(attr):
    return dict(re.findall(r"(\w+) = (\w+)", attr))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_structures_change_one_choice(d):
    default = _fields(schedules.hopper_forward(d))
    changed = {
        "ws_no_pp": {"pingpong": "false"},
        "ws_overlap": {"intra_wg_overlap": "true"},
        "ws_no_overlap": {"intra_wg_overlap": "false"},
        "persistent": {"persistent": "true"},
        "no_ws": {"producer_regs": "0", "consumer_regs": "0", "pingpong": "false",
                  "intra_wg_overlap": "false"},
    }
    for structure, fields in changed.items():
        assert _fields(schedules.hopper_forward(d, structure)) == {**default, **fields}, structure
    with pytest.raises(ValueError, match="structure must be one of"):
        schedules.hopper_forward(d, "fast")


def test_n176_is_d128_only():
    assert "block_n = 176" in schedules.hopper_forward(128, "n176_overlap")
    with pytest.raises(ValueError, match="d128 tile"):
        schedules.hopper_forward(64, "n176_overlap")
