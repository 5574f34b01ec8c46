"""A real generation client of fa3's KV-cache path, on the CPU: random-init
transformers models decode greedily with fa3.integrations.transformers'
"fa3_kvcache" attention (each layer appends to a paged cache with shuffled
pages and attends to it in one fa3.attention_with_kvcache call) and must
produce the tokens of transformers' own generate() under SDPA.

Bound: both run in float32; each step's logits agree to float32 rounding
through the layers (asserted 1e-4 of the logits' scale). A wrong page, slot,
cache length, causal alignment or window moves logits by O(their scale)
and, over 24 greedy steps, the tokens."""

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import fa3.integrations.transformers as fa3_hf  # noqa: E402


def _models(config):
    fa3_hf.register_kvcache()
    torch.manual_seed(0)
    sdpa = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    fa3_model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                              attn_implementation=fa3_hf.KVCACHE_NAME).eval()
    fa3_model.load_state_dict(sdpa.state_dict())
    # A larger init than the default 0.02 spreads the logits, so that greedy
    # choices are far from ties and a wrong attention shows.
    with torch.no_grad():
        for model in (sdpa, fa3_model):
            for i, p in enumerate(model.parameters()):
                if p.dim() == 2:
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.15)
    return sdpa, fa3_model


CONFIGS = {
    "llama-gqa": transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                          max_position_embeddings=256),
    "mistral-window": transformers.MistralConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                                 num_hidden_layers=2, num_attention_heads=4,
                                                 num_key_value_heads=1, sliding_window=8,
                                                 max_position_embeddings=256),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("page_size", [1, 16])
def test_greedy_generation_matches_sdpa(name, page_size):
    sdpa, fa3_model = _models(CONFIGS[name])
    prompt = torch.randint(0, 256, (2, 19), generator=torch.Generator().manual_seed(1))
    tokens, logits = fa3_hf.generate_greedy(fa3_model, prompt, max_new_tokens=24, page_size=page_size,
                                            return_logits=True)
    want = sdpa.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    assert torch.equal(tokens, want.sequences), (tokens[:, 19:], want.sequences[:, 19:])
    for step, (got, ref) in enumerate(zip(logits, want.logits)):
        scale = ref.abs().max().item()
        err = (got - ref).abs().max().item()
        assert err <= 1e-4 * scale, f"step {step}: logits differ by {err:.3g} (scale {scale:.3g})"


def test_errors_name_the_cause():
    sdpa, fa3_model = _models(CONFIGS["llama-gqa"])
    prompt = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="generate_greedy needs a model loaded with attn_implementation='fa3_kvcache'"):
        fa3_hf.generate_greedy(sdpa, prompt, 2)
    with pytest.raises(ValueError, match="pass fa3_cache=PagedKVCache"):
        fa3_model(input_ids=prompt, use_cache=False)
