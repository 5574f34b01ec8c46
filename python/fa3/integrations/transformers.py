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
  dtype, as SDPA's do;
* packed (padding-free) batches: one row of concatenated sequences, given by
  the `cu_seq_lens_q/k` and `max_length_q/k` kwargs (transformers'
  `DataCollatorWithFlattening`) or by restarting `position_ids`, as
  transformers' FlashAttention path detects them, run
  `fa3.attention_varlen`: each sequence attends to itself only;
* determinism: the `deterministic` kwarg or FLASH_ATTENTION_DETERMINISTIC=1
  (as transformers' FlashAttention path reads them) selects fa3's
  deterministic backward.

Attention dropout while training (the config's `attention_dropout`) runs
fa3's dropout (a fresh seed from torch's generator per call, the mask
regenerated in the backward), as transformers' FlashAttention path does.

What fa3 cannot express is an error naming the cause, never a silently
different result: a padding (or any other explicit) attention mask, dropout
on a padding-free (packed) batch, attention sinks (`s_aux`), float32
activations outside autocast (fa3's CUDA kernels take bf16/f16) and head
dims other than 64, 128 and 256.

Generation through fa3's KV-cache path (`fa3.attention_with_kvcache`):
`register_kvcache()` adds "fa3_kvcache", whose attention appends each
layer's new keys and values to fa3's cache and attends to the whole cache
in one fa3 call; `generate_greedy(model, input_ids, max_new_tokens)` runs
the prefill and the decode steps with it. On the CPU the cache is a
`PagedKVCache` (numpy, fa3's CPU pipeline); with the model and `input_ids`
on a CUDA device (bf16/f16) it is a `CudaKVCache`, contiguous torch
tensors that the Hopper kernel of fa3.attention_kvcache reads.

    fa3_hf.register_kvcache()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="fa3_kvcache")
    tokens = fa3_hf.generate_greedy(model, input_ids, max_new_tokens=32)
"""

import os

import numpy as np
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
    dropout = float(dropout) if dropout and module.training else 0.0
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
    scale = None if scaling is None else float(scaling)
    softcap = float(softcap) if softcap else 0.0
    # As transformers' FlashAttention path: the `deterministic` kwarg, else
    # FLASH_ATTENTION_DETERMINISTIC=1 in the environment.
    deterministic = kwargs.get("deterministic")
    if deterministic is None:
        deterministic = os.environ.get("FLASH_ATTENTION_DETERMINISTIC", "0") == "1"
    deterministic = bool(deterministic)
    packed = _packed_sequences(query, key, kwargs)
    if packed is not None:
        # Padding-free batches (transformers' DataCollatorWithFlattening):
        # one row of concatenated sequences, each attending to itself only.
        cu_q, cu_k, max_q, max_k = packed
        if dropout:
            raise ValueError(f"fa3 attention: attention dropout ({dropout}) on a padding-free (packed) batch is not "
                             "supported; set the config's attention_dropout to 0, call model.eval() or pad the "
                             "batch")
        out = fa3.attention_varlen(query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
                                   cu_q, cu_k, max_q, max_k, causal=causal, softmax_scale=scale,
                                   window_size=window, softcap=softcap, deterministic=deterministic)
        return out.unsqueeze(0), None
    # fa3 reads (B, S, H, D); transposing the views costs nothing (fa3 copies
    # a non-dense layout once).
    out = fa3.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal=causal,
                        softmax_scale=scale, window_size=window, softcap=softcap, deterministic=deterministic,
                        dropout_p=dropout)
    return out, None


def _packed_sequences(query, key, kwargs):
    """(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) when the
    batch is one row of packed sequences, as transformers' FlashAttention
    path detects it: the four varlen kwargs (`cu_seq_lens_q`,
    `cu_seq_lens_k`, `max_length_q`, `max_length_k`, from
    DataCollatorWithFlattening or the model), or position ids of batch 1
    that restart (not one increasing run), each sequence starting where the
    position is the smallest. None otherwise. Dense attention over such a
    row would attend across sequences."""
    names = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
    given = [kwargs.get(n) for n in names]
    position_ids = kwargs.get("position_ids")
    if all(x is not None for x in given):
        cu_q, cu_k, max_q, max_k = given
    elif (position_ids is not None and query.shape[0] == 1 and position_ids.shape[-1] > 1
          and position_ids.numel() == query.shape[2]):
        positions = position_ids.reshape(-1)
        start = positions.min()
        if bool((positions == torch.arange(positions.numel(), device=positions.device) + start).all()):
            return None  # one increasing run: one sequence
        starts = (positions == start).nonzero().view(-1).to(torch.int32)
        cu_q = torch.cat((starts, torch.tensor([positions.numel()], dtype=torch.int32, device=starts.device)))
        cu_k = cu_q
        max_q = max_k = int(cu_q.diff().max())
    else:
        return None
    if query.shape[0] != 1 or key.shape[2] != query.shape[2]:
        raise ValueError(f"fa3 attention: packed sequences (cu_seq_lens or restarting position_ids) need one row "
                         f"of queries and keys of the same length, got query {tuple(query.shape)} and key "
                         f"{tuple(key.shape)} (no KV cache)")
    as_int32 = lambda x: x.to(device=query.device, dtype=torch.int32)  # noqa: E731
    return as_int32(cu_q), as_int32(cu_k), int(max_q), int(max_k)


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


KVCACHE_NAME = "fa3_kvcache"


class PagedKVCache:
    """The KV cache of a generation through fa3: per layer, a paged key and
    value cache `(num_pages, page_size, num_key_value_heads, head_dim)` of
    numpy arrays, one page table `(batch, max_pages)` shared by the layers
    (pages handed out in a shuffled order, as a serving system's allocator
    would leave them), and each layer's cached length per sequence.

    The "fa3_kvcache" attention appends a layer's new rows and attends to
    everything cached in one `fa3.attention_with_kvcache` call (the compiled
    fa3.kvcache_append + fa3.attention_kvcache)."""

    def __init__(self, config, batch_size, max_length, page_size=16, dtype=np.float32, seed=0):
        heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.page_size = int(page_size)
        self.max_length = int(max_length)
        pages_per_sequence = -(-self.max_length // self.page_size)
        num_pages = batch_size * pages_per_sequence
        order = np.random.default_rng(seed).permutation(num_pages).astype(np.int32)
        self.page_table = order.reshape(batch_size, pages_per_sequence)
        shape = (num_pages, self.page_size, self.num_kv_heads, self.head_dim)
        layers = config.num_hidden_layers
        self.keys = [np.zeros(shape, dtype) for _ in range(layers)]
        self.values = [np.zeros(shape, dtype) for _ in range(layers)]
        self.lengths = np.zeros((layers, batch_size), np.int32)

    def get_seq_length(self, layer_idx=0):
        """Tokens cached so far (the same for every sequence of the batch)."""
        return int(self.lengths[layer_idx].max(initial=0))

    def attend(self, layer_idx, query, key, value, causal, scale, window, softcap):
        """Appends layer `layer_idx`'s new rows `key`/`value` (B, S_new, Hkv,
        D) and returns the attention of `query` (B, S_new, H, D) over the
        cache, numpy in and out."""
        lengths = self.lengths[layer_idx]
        out = fa3.attention_with_kvcache(query, self.keys[layer_idx], self.values[layer_idx], k=key, v=value,
                                         cache_seqlens=lengths, page_table=self.page_table, causal=causal,
                                         softmax_scale=scale, window_size=window, softcap=softcap)
        lengths += key.shape[1]
        return out


class CudaKVCache:
    """The KV cache of a generation through fa3 on a CUDA device: per
    layer, a key and value cache of torch tensors (zeros: the rows past a
    sequence's length are read and masked, so they must be finite) and each
    layer's cached length per sequence, an int32 tensor on the device that
    the kernel reads. Contiguous, `(batch, max_length, num_key_value_heads,
    head_dim)`, by default; with `page_size`, paged as PagedKVCache is,
    `(num_pages, page_size, num_key_value_heads, head_dim)` with one page
    table `(batch, max_pages)` on the device shared by the layers (pages
    handed out in the shuffled order of `seed`).

    The "fa3_kvcache" attention appends a layer's new rows and attends to
    everything cached in one `fa3.attention_with_kvcache` call (the append
    by torch indexing, then the Hopper kernel of fa3.attention_kvcache)."""

    def __init__(self, config, batch_size, max_length, device, dtype=torch.bfloat16, page_size=None, seed=0):
        heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.max_length = int(max_length)
        self.page_table = None
        if page_size is None:
            shape = (batch_size, self.max_length, self.num_kv_heads, self.head_dim)
        else:
            if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
                raise ValueError(f"page_size must be a positive int (or None: a contiguous cache), got {page_size!r}")
            pages_per_sequence = -(-self.max_length // page_size)
            num_pages = batch_size * pages_per_sequence
            order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).to(torch.int32)
            self.page_table = order.view(batch_size, pages_per_sequence).to(device)
            shape = (num_pages, page_size, self.num_kv_heads, self.head_dim)
        layers = config.num_hidden_layers
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.lengths = torch.zeros((layers, batch_size), dtype=torch.int32, device=device)
        # The same lengths on the host (every sequence grows alike): no
        # device sync to know where the next positions start.
        self.cached = [0] * layers

    def get_seq_length(self, layer_idx=0):
        """Tokens cached so far (the same for every sequence of the batch)."""
        return self.cached[layer_idx]

    def attend(self, layer_idx, query, key, value, causal, scale, window, softcap):
        """Appends layer `layer_idx`'s new rows `key`/`value` (B, S_new, Hkv,
        D) and returns the attention of `query` (B, S_new, H, D) over the
        cache, torch CUDA tensors in and out."""
        lengths = self.lengths[layer_idx]
        out = fa3.attention_with_kvcache(query, self.keys[layer_idx], self.values[layer_idx], k=key, v=value,
                                         cache_seqlens=lengths, page_table=self.page_table, causal=causal,
                                         softmax_scale=scale, window_size=window, softcap=softcap)
        lengths += key.shape[1]
        self.cached[layer_idx] += key.shape[1]
        return out


def kvcache_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                              sliding_window=None, softcap=None, is_causal=None, fa3_cache=None, **kwargs):
    """The "fa3_kvcache" attention: `key`/`value` are this step's new rows
    (the model runs without a transformers cache); they go into `fa3_cache`
    (a PagedKVCache or CudaKVCache passed to the model call) and the queries
    attend to the whole cache. Float32 CPU tensors (fa3's CPU pipeline) with
    a PagedKVCache; bf16/f16 CUDA tensors (the Hopper kernel) with a
    CudaKVCache."""
    if not isinstance(fa3_cache, (PagedKVCache, CudaKVCache)):
        raise ValueError(f"fa3_kvcache attention: pass fa3_cache=PagedKVCache(...) or CudaKVCache(...) to the model "
                         f"call, got {type(fa3_cache).__name__} "
                         "(fa3.integrations.transformers.generate_greedy does)")
    if attention_mask is not None:
        raise ValueError("fa3_kvcache attention: an explicit attention mask (padding) is not expressible")
    if dropout and module.training:
        raise ValueError("fa3_kvcache attention: dropout is not supported")
    cuda = isinstance(fa3_cache, CudaKVCache)
    if (query.device.type == "cuda") != cuda:
        raise ValueError(f"fa3_kvcache attention: tensors on {query.device} need "
                         f"{'a CudaKVCache' if query.device.type == 'cuda' else 'a PagedKVCache (the CPU)'}, "
                         f"got a {type(fa3_cache).__name__}")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = (-1, -1) if sliding_window is None else (int(sliding_window) - 1, 0)
    if cuda:
        def to_bshd(x):
            return x.transpose(1, 2).contiguous()

        out = fa3_cache.attend(module.layer_idx, to_bshd(query), to_bshd(key), to_bshd(value), causal,
                               None if scaling is None else float(scaling), window, float(softcap) if softcap else 0.0)
        return out, None

    def to_numpy(x):
        return x.detach().transpose(1, 2).contiguous().numpy()

    out = fa3_cache.attend(module.layer_idx, to_numpy(query), to_numpy(key), to_numpy(value), causal,
                           None if scaling is None else float(scaling), window, float(softcap) if softcap else 0.0)
    return torch.from_numpy(out).to(query.dtype), None


def register_kvcache(name=KVCACHE_NAME):
    """Registers the "fa3_kvcache" attention (and FlashAttention's mask
    function: no mask without padding); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, kvcache_attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name


@torch.no_grad()
def generate_greedy(model, input_ids, max_new_tokens, page_size=16, seed=0, return_logits=False):
    """Greedy decoding through fa3's KV-cache path: one prefill call over the
    prompt, then one call per new token, each attention appending to and
    reading from a PagedKVCache (pages in the order of `seed`) on the CPU,
    or a CudaKVCache when `input_ids` is on a CUDA device (the model there
    too, in bf16/f16), paged alike (`page_size=None`: contiguous). `model` must
    use attn_implementation "fa3_kvcache" (register_kvcache). Returns the
    prompt followed by the new tokens, like `model.generate(do_sample=False)`;
    with `return_logits`, also the logits each new token was chosen from
    (a list of (batch, vocab) tensors)."""
    if model.config._attn_implementation != KVCACHE_NAME:
        raise ValueError(f"generate_greedy needs a model loaded with attn_implementation={KVCACHE_NAME!r}, "
                         f"got {model.config._attn_implementation!r}")
    batch, prompt = input_ids.shape
    if input_ids.device.type == "cuda":
        cache = CudaKVCache(model.config, batch, prompt + max_new_tokens, input_ids.device, dtype=model.dtype,
                            page_size=page_size, seed=seed)
    else:
        cache = PagedKVCache(model.config, batch, prompt + max_new_tokens, page_size=page_size, seed=seed)
    tokens = input_ids
    step = input_ids
    scores = []
    for _ in range(max_new_tokens):
        start = cache.get_seq_length()
        positions = torch.arange(start, start + step.shape[1], device=input_ids.device).unsqueeze(0).expand(batch, -1)
        logits = model(input_ids=step, position_ids=positions, use_cache=False, fa3_cache=cache).logits[:, -1]
        scores.append(logits)
        step = logits.argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, step], dim=1)
    return (tokens, scores) if return_logits else tokens
