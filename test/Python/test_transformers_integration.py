"""fa3.integrations.transformers without a GPU: the registration, the
options it takes from a model, the errors for what fa3 cannot express, and
a whole random-init Llama (GQA) and Mistral (sliding window) forward whose
attention runs fa3's compiled CPU pipeline (fa3.attention on numpy arrays,
substituted for the CUDA call), against the same model under SDPA.

Bound: the models run in float32 on the CPU; fa3's CPU attention computes
in float32 too, so logits agree to float32 rounding through two layers
(measured ~1e-6; asserted 1e-4 of the logits' scale). A wrong layout, GQA
mapping, causal alignment or window moves logits by O(1)."""

import copy

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import fa3  # noqa: E402
import fa3.integrations.transformers as fa3_hf  # noqa: E402

_fa3_attention = fa3.attention  # the real one, before any monkeypatch


@pytest.fixture(scope="module", autouse=True)
def _registered():
    assert fa3_hf.register() == "fa3"


class _Module(torch.nn.Module):
    is_causal = True


def _qkv(dtype=torch.bfloat16, sq=8, sk=8):
    q = torch.randn(1, 4, sq, 64, dtype=dtype)
    k = torch.randn(1, 2, sk, 64, dtype=dtype)
    return q, k, k.clone()


def test_register_adds_attention_and_mask_functions():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert AttentionInterface._global_mapping["fa3"] is fa3_hf.attention_forward
    assert "fa3" in AttentionMaskInterface._global_mapping
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="fa3")
    assert model.config._attn_implementation == "fa3"


def test_options_reach_fa3(monkeypatch):
    seen = {}

    def fake_attention(q, k, v, **kwargs):
        seen.update(kwargs, q=q.shape, k=k.shape)
        return torch.zeros(q.shape[0], q.shape[1], q.shape[2], v.shape[3], dtype=q.dtype)

    monkeypatch.setattr(fa3, "attention", fake_attention)
    q, k, v = _qkv(sq=3, sk=8)
    out, weights = fa3_hf.attention_forward(_Module(), q, k, v, None, scaling=0.2, sliding_window=4, softcap=30.0)
    assert weights is None and out.shape == (1, 3, 4, 64)
    assert seen["q"] == (1, 3, 4, 64) and seen["k"] == (1, 8, 2, 64)  # (B, S, H, D), GQA heads kept
    assert seen["causal"] is True and seen["window_size"] == (3, 0)
    assert seen["softmax_scale"] == pytest.approx(0.2) and seen["softcap"] == 30.0
    assert seen["deterministic"] is False and seen["dropout_p"] == 0.0
    # Attention dropout while training only (eval: none).
    fa3_hf.attention_forward(_Module().eval(), q, k, v, None, dropout=0.1)
    assert seen["dropout_p"] == 0.0
    fa3_hf.attention_forward(_Module().train(), q, k, v, None, dropout=0.1)
    assert seen["dropout_p"] == pytest.approx(0.1)
    fa3_hf.attention_forward(_Module(), q, k, v, None, is_causal=False)
    assert seen["causal"] is False and seen["window_size"] == (-1, -1) and seen["softcap"] == 0.0
    # Determinism as transformers' FlashAttention path reads it: the kwarg,
    # else FLASH_ATTENTION_DETERMINISTIC.
    fa3_hf.attention_forward(_Module(), q, k, v, None, deterministic=True)
    assert seen["deterministic"] is True
    monkeypatch.setenv("FLASH_ATTENTION_DETERMINISTIC", "1")
    fa3_hf.attention_forward(_Module(), q, k, v, None)
    assert seen["deterministic"] is True
    fa3_hf.attention_forward(_Module(), q, k, v, None, deterministic=False)
    assert seen["deterministic"] is False
    monkeypatch.delenv("FLASH_ATTENTION_DETERMINISTIC")
    # Under autocast, float32 activations run in the autocast dtype (as SDPA).
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fa3_hf.attention_forward(_Module(), *_qkv(torch.float32), None)
    assert out.dtype == torch.bfloat16


def test_inexpressible_inputs_are_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="explicit attention mask"):
        fa3_hf.attention_forward(_Module(), q, k, v, torch.ones(1, 8, dtype=torch.bool))
    # Dropout on a padding-free batch (restarting position ids): no varlen dropout.
    training = _Module().train()
    q1, k1, v1 = _qkv(sq=8, sk=8)
    with pytest.raises(ValueError, match="attention dropout .* on a padding-free"):
        fa3_hf.attention_forward(training, q1, k1, v1, None, dropout=0.1,
                                 position_ids=torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]]))
    with pytest.raises(ValueError, match="attention sinks"):
        fa3_hf.attention_forward(_Module(), q, k, v, None, s_aux=torch.zeros(4))
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        fa3_hf.attention_forward(_Module(), *_qkv(torch.float32), None)
    with pytest.raises(ValueError, match="non-causal"):
        fa3_hf.attention_forward(_Module(), q, k, v, None, is_causal=False, sliding_window=4)


def _cpu_fa3(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0, deterministic=False,
             dropout_p=0.0):
    """fa3.attention's CPU pipeline on torch CPU tensors (numpy in and out;
    the CPU is always deterministic; these models have no attention
    dropout)."""
    assert dropout_p == 0.0
    out = _fa3_attention(*(np.ascontiguousarray(x.detach().float().numpy()) for x in (q, k, v)), causal=causal,
                        softmax_scale=softmax_scale, window_size=window_size, softcap=softcap)
    return torch.from_numpy(out)


@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_model_forward_through_fa3_cpu_matches_sdpa(family, monkeypatch):
    torch.manual_seed(0)
    common = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    if family == "llama":
        config = transformers.LlamaConfig(**common)
    else:
        config = transformers.MistralConfig(**common, sliding_window=24)
    # One config each: a model keeps (and from_config sets) its config's
    # attention implementation.
    sdpa = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="fa3").eval()
    assert sdpa.config._attn_implementation == "sdpa" and ours.config._attn_implementation == "fa3"
    ours.load_state_dict(sdpa.state_dict())
    # The activations are float32 on the CPU: fa3's CPU pipeline takes them
    # where the CUDA kernels would take bf16.
    monkeypatch.setattr(fa3, "attention", _cpu_fa3)
    monkeypatch.setattr(fa3_hf, "_CUDA_DTYPES", (torch.float32,))
    tokens = torch.randint(0, 256, (2, 77))
    with torch.no_grad():
        want = sdpa(tokens).logits
        got = ours(tokens).logits
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    print(f"{family}: max |logits fa3 - sdpa| = {err:.2e} (scale {scale:.2f})")
    assert err <= 1e-4 * scale
    # The sliding window matters at 77 tokens > 24: without it fa3 differs.
    if family == "mistral":
        monkeypatch.setattr(fa3, "attention", lambda q, k, v, **o: _cpu_fa3(q, k, v, **{**o, "window_size": (-1, -1)}))
        with torch.no_grad():
            assert (ours(tokens).logits - want).abs().max().item() > 100 * err


@pytest.mark.parametrize("how", ["position_ids", "cu_seq_lens"])
def test_packed_sequences_attend_to_themselves(how, monkeypatch):
    """A padding-free batch (one row of concatenated sequences, as
    transformers' DataCollatorWithFlattening makes it) runs
    fa3.attention_varlen (its CPU pipeline on torch tensors here): each
    sequence's logits equal the SDPA model's on that sequence alone (float32,
    bound as above). Dense attention over the row would let later sequences
    see earlier ones (checked: it moves the logits by O(1))."""
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    sdpa = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="fa3").eval()
    ours.load_state_dict(sdpa.state_dict())
    monkeypatch.setattr(fa3, "attention", _cpu_fa3)
    monkeypatch.setattr(fa3_hf, "_CUDA_DTYPES", (torch.float32,))
    lengths = [13, 30, 1, 7]
    sequences = [torch.randint(0, 256, (1, n)) for n in lengths]
    row = torch.cat(sequences, dim=1)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    kwargs = {"position_ids": positions}
    if how == "cu_seq_lens":
        cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
        kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    with torch.no_grad():
        want = torch.cat([sdpa(s).logits for s in sequences], dim=1)
        got = ours(row, **kwargs).logits
        dense = sdpa(row, position_ids=positions).logits
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    print(f"{how}: max |logits fa3 packed - sdpa per sequence| = {err:.2e} (scale {scale:.2f})")
    assert err <= 1e-4 * scale
    assert (dense - want).abs().max().item() > 100 * err


def test_packed_sequences_with_a_kv_cache_are_an_error():
    q, k, v = _qkv(dtype=torch.bfloat16, sq=4, sk=8)
    positions = torch.tensor([[0, 1, 0, 1]])
    with pytest.raises(ValueError, match="packed sequences .* need one row of queries and keys of the same length"):
        fa3_hf.attention_forward(_Module(), q, k, v, None, position_ids=positions)
    # One increasing run is one sequence: the dense path (its error here: CPU tensors).
    with pytest.raises(ValueError, match="runs torch tensors on CUDA"):
        fa3_hf.attention_forward(_Module(), q, k, v, None, position_ids=torch.arange(3, 7)[None])


def test_packed_training_example_runs():
    """docs/examples/packed_training.py on the CPU (bf16 through fa3's CPU
    varlen pipeline): its packed loss equals SDPA's padded one at init, and
    60 packed steps learn a task that needs attention within each sequence
    (the script asserts both)."""
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples" / "packed_training.py"
    proc = subprocess.run([sys.executable, str(script), "--steps", "60"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "initial loss: fa3 packed" in proc.stdout and "mean loss of the first 5 steps" in proc.stdout
