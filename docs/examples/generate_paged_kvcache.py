"""Greedy generation with a transformers causal LM whose attention runs
through fa3's KV-cache path: every layer appends its new keys and values to
a paged cache (16-token pages handed out in shuffled order) and attends to
the whole cache in one fa3 call (fa3.kvcache_append + fa3.attention_kvcache,
compiled by fa3 and run by its CPU pipeline). The tokens are compared with
transformers' own generate() under SDPA.

    PYTHONPATH=python python docs/examples/generate_paged_kvcache.py

A random-init Llama (GQA 8:2, head dim 32), nothing downloaded.
"""

import copy
import time

import torch
import transformers

import fa3.integrations.transformers as fa3_hf


def main():
    fa3_hf.register_kvcache()
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                                      max_position_embeddings=512)
    torch.manual_seed(0)
    sdpa = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                          attn_implementation=fa3_hf.KVCACHE_NAME).eval()
    model.load_state_dict(sdpa.state_dict())

    prompt = torch.randint(0, config.vocab_size, (2, 37))
    start = time.perf_counter()
    tokens = fa3_hf.generate_greedy(model, prompt, max_new_tokens=48, page_size=16)
    fa3_s = time.perf_counter() - start
    start = time.perf_counter()
    want = sdpa.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=48, do_sample=False,
                         pad_token_id=0)
    sdpa_s = time.perf_counter() - start
    same = torch.equal(tokens, want)
    print(f"fa3 paged KV cache: {tokens.shape[1] - prompt.shape[1]} new tokens per sequence in {fa3_s:.2f} s "
          f"(first call compiles); SDPA generate: {sdpa_s:.2f} s")
    print("new tokens, sequence 0:", tokens[0, prompt.shape[1]:].tolist())
    print("same tokens as SDPA:", same)
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
