"""fa3: attention compiled by fa3's MLIR compiler, from Python.

    import fa3
    out = fa3.attention(q, k, v, causal=True)   # torch CUDA tensors or numpy arrays
    out.sum().backward()                        # torch: the backward runs fa3.attention_grad

`fa3.attention` follows FlashAttention's `flash_attn_func` layout
(batch, seqlen, heads, headdim); `fa3.attention_varlen` (packed
variable-length batches) and `fa3.attention_with_kvcache` (contiguous or
paged KV caches with appends) follow `flash_attn_varlen_func` and
`flash_attn_with_kvcache` (numpy arrays or torch CPU tensors: the CPU
pipeline; on torch CUDA tensors `fa3.attention_with_kvcache` runs its
Hopper kernels and `fa3.attention_varlen` its forward kernel). `fa3.compile` returns the compiled kernel
for inspection (MLIR, PTX) and explicit launches. Compiled kernels are
cached in memory per process and, for CUDA, on disk (`FA3_CACHE_DIR`).
Compile and CUDA failures raise RuntimeError (`fa3.Error`); bad arguments
raise ValueError/TypeError naming the argument.

`fa3.compile_mlir` compiles an MLIR function of your own (any schedule
attribute) into the same kind of kernel. `fa3.reference` (float64 NumPy
reference) needs no compiled extension; `fa3.integrations.transformers`
registers fa3 as a Hugging Face transformers attention implementation;
`fa3.merge_attention` merges partial attentions by their LSE (split keys,
ring attention), differentiably with torch; `fa3.jax` is fa3 for JAX.
"""

from . import _jit
from ._inference import attention_varlen, attention_varlen_grad, attention_with_kvcache
from .api import Kernel, attention, compile, compile_mlir
from .merge import merge_attention

__version__ = "0.1.0"


def cache_info():
    """Statistics of the in-process JIT cache (see fa3._jit.cache_info)."""
    return _jit.cache_info()


def __getattr__(name):
    # fa3.Error is the extension's exception type; resolve it lazily so that
    # `import fa3` works before the extension is built.
    if name == "Error":
        return _jit._module().Error
    raise AttributeError(f"module 'fa3' has no attribute {name!r}")


__all__ = ["attention", "attention_varlen", "attention_varlen_grad", "attention_with_kvcache", "compile", "compile_mlir", "merge_attention", "Kernel", "cache_info", "Error"]
