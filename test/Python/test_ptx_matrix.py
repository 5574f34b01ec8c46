"""scripts/ptx_matrix.py's comparison: PTX that differs only in the inline-asm
comment lines counts as identical, and so does PTX that ptxas assembles to
the same cubin; any other change, or a kernel missing on one side, fails
the comparison."""

import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ptx_matrix", REPO / "scripts" / "ptx_matrix.py")
ptx_matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ptx_matrix)


def _write(directory, name, text):
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text)


def test_compare(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "k.ptx", "\t// begin inline asm\n\tbar.sync 1, 256;\n\t// end inline asm\n")
    _write(b, "k.ptx", "\tbar.sync 1, 256;\n")
    assert ptx_matrix.compare(a, b) == 0
    assert "1 of 1 kernels identical, 0 equal up to register numbering, 0 with the same cubin" in \
        capsys.readouterr().out
    # The same code with registers numbered otherwise (consistently): equal.
    _write(a, "r.ptx", "\tmov.b32 %r5, 0;\n\tadd.s32 %r6, %r5, %r5;\n")
    _write(b, "r.ptx", "\tmov.b32 %r4, 0;\n\tadd.s32 %r9, %r4, %r4;\n")
    assert ptx_matrix.compare(a, b) == 0
    assert "equal up to register numbering: r.ptx" in capsys.readouterr().out
    # Not a consistent renaming: the add reads another register.
    _write(b, "r.ptx", "\tmov.b32 %r4, 0;\n\tadd.s32 %r9, %r4, %r7;\n")
    assert ptx_matrix.compare(a, b) == 1
    assert "differs: r.ptx" in capsys.readouterr().out
    (a / "r.ptx").unlink()
    (b / "r.ptx").unlink()
    _write(b, "k.ptx", "\tbar.sync 2, 256;\n")
    assert ptx_matrix.compare(a, b) == 1
    assert "differs: k.ptx" in capsys.readouterr().out
    _write(a, "only.ptx", "ret;\n")
    assert ptx_matrix.compare(a, b) == 1
    assert "only in one directory: only.ptx" in capsys.readouterr().out


_KERNEL = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [p];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, %ctaid.x;
	add.s32 %r3, %r1, %r2;
	st.global.u32 [%rd2], %r3;
	ret;
}
"""


def test_compare_assembles_what_differs(tmp_path, capsys):
    """Two independent instructions in the other order: not a renaming, but
    ptxas assembles both to the same cubin; a changed operation does not."""
    ptxas = ptx_matrix._ptxas()
    if ptxas is None:
        pytest.skip("no ptxas (CUDA's assembler) on this machine")
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "k.ptx", _KERNEL)
    swapped = _KERNEL.replace("\tmov.u32 %r1, %tid.x;\n\tmov.u32 %r2, %ctaid.x;\n",
                              "\tmov.u32 %r2, %ctaid.x;\n\tmov.u32 %r1, %tid.x;\n")
    assert swapped != _KERNEL
    _write(b, "k.ptx", swapped)
    assert ptx_matrix.compare(a, b, ptxas) == 0
    assert "same cubin: k.ptx" in capsys.readouterr().out
    _write(b, "k.ptx", _KERNEL.replace("add.s32", "sub.s32"))
    assert ptx_matrix.compare(a, b, ptxas) == 1
    assert "differs: k.ptx" in capsys.readouterr().out
