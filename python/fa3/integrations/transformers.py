"""fa3 as a Hugging Face transformers attention implementation.

    import fa3.integrations.transformers as fa3_hf
    fa3_hf.register()                                  # once per process
    model = AutoModelForCausalLM.from_config(config, attn_implementation="fa3",
                                             dtype=torch.bfloat16).cuda()

`register()` adds "fa3" to transformers' `AttentionInterface` (the function
below) and to its `AttentionMaskInterface` (FlashAttention's mask function:
no mask unless there is padding), so every model that dispatches through
`ALL_ATTENTION_FUNCTIONS` runs fa3's kernels, forward and backward. From the
model it takes:

* GQA/MQA: key/value keep their `num_key_value_heads` (no repeat);
* causality: the call's `is_causal`, else the module's; causal masks align
  to the bottom-right corner, as in decoding with a KV cache (Sq < Sk);
* `sliding_window` (Mistral, Gemma 2/3 local layers): keys within
  `sliding_window - 1` before the query (transformers' mask
  `kv > q - sliding_window`), causal layers only;
* `softcap` (Gemma 2's `attn_logit_softcapping`) and `scaling`;
* autocast: float32 activations under `torch.autocast` run in the autocast
  dtype, as SDPA's do.

What fa3 cannot express is an error naming the cause, never a silently
different result: a padding (or any other explicit) attention mask, dropout
while training, attention sinks (`s_aux`), float32 activations outside
autocast (fa3's CUDA kernels take bf16/f16) and head dims other than 64, 128
and 256.
"""

import torch

import fa3

NAME = "fa3"
# The activation dtypes fa3's CUDA kernels take.
_CUDA_DTYPES = (torch.bfloat16, torch.float16)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      sliding_window=None, softcap=None, is_causal=None, **kwargs):
    """transformers' attention-function signature: query (B, H, Sq, D),
    key/value (B, Hkv, Sk, D); returns (output (B, Sq, H, D), None)."""
    if attention_mask is not None:
        raise ValueError(
            "fa3 attention: an explicit attention mask (padding, or a custom mask) is not expressible; fa3 "
            "takes causal, sliding-window and full attention. Pass unpadded batches, or use "
            "attn_implementation='sdpa' for this model")
    if dropout and module.training:
        raise ValueError(f"fa3 attention: attention dropout ({dropout}) is not supported; set the config's "
                         "attention_dropout to 0 or call model.eval()")
    if kwargs.get("s_aux") is not None:
        raise ValueError("fa3 attention: attention sinks (s_aux) are not supported")
    if query.dtype == torch.float32 and torch.is_autocast_enabled(query.device.type):
        # As SDPA under autocast: attention runs in the autocast dtype.
        dtype = torch.get_autocast_dtype(query.device.type)
        query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    if query.dtype not in _CUDA_DTYPES:
        raise TypeError(f"fa3 attention: the query is {query.dtype}; fa3's CUDA kernels take bfloat16 or "
                        "float16 (load the model with dtype=torch.bfloat16)")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal)
    window = (-1, -1)
    if sliding_window is not None:
        if not causal:
            raise ValueError("fa3 attention: a sliding window on a non-causal layer is not supported")
        window = (int(sliding_window) - 1, 0)
    # fa3 reads (B, S, H, D); transposing the views costs nothing (fa3 copies
    # a non-dense layout once).
    out = fa3.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal=causal,
                        softmax_scale=None if scaling is None else float(scaling), window_size=window,
                        softcap=float(softcap) if softcap else 0.0)
    return out, None


def register(name=NAME):
    """Registers fa3 under `name` with transformers' attention and mask
    interfaces; returns the name to pass as `attn_implementation`."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    except ImportError as e:
        raise ImportError("fa3.integrations.transformers needs transformers >= 5 "
                          f"(AttentionInterface and AttentionMaskInterface): {e}") from e
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name
