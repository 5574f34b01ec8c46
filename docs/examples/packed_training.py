"""Padding-free (packed) training of a transformers model through fa3:
batches from transformers' DataCollatorWithFlattening are one row of
concatenated sequences with restarting position ids and the varlen kwargs
(cu_seq_lens_q/k, max_length_q/k); with attn_implementation="fa3" each
sequence attends to itself only (fa3.attention_varlen, and its backward),
so no compute goes to padding.

The script first checks the packed loss of the random-init model against
the same model under SDPA on the padded batch (attention mask), then
trains on a task that needs attention within each sequence (x[t+1] =
perm[x[t-1]]) and prints the losses.

    python docs/examples/packed_training.py            # CUDA (bf16) if present, else the CPU pipeline
    python docs/examples/packed_training.py --steps 50
"""
import argparse
import copy
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import fa3.integrations.transformers as fa3_hf  # noqa: E402

try:
    import transformers
    from transformers import DataCollatorWithFlattening
except ImportError:  # pragma: no cover
    sys.exit("this example needs transformers >= 5 (pip install transformers)")


def batches(vocab, count, batch_size, seed):
    """`count` batches of `batch_size` sequences of 8 ... 64 tokens where a
    fixed permutation of the token two back gives the next one (x[t+1] =
    perm[x[t-1]]): a model must attend to the previous position of its own
    sequence to learn it (the other sequences of the row do not help)."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))
    for _ in range(count):
        features = []
        for _ in range(batch_size):
            n = int(torch.randint(8, 65, (1,), generator=gen))
            x = torch.randint(vocab, (2,), generator=gen).tolist()
            while len(x) < n:
                x.append(int(perm[x[-2]]))
            features.append({"input_ids": x})
        yield features


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fa3_hf.register()
    vocab = 128
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                      max_position_embeddings=128, attention_dropout=0.0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="fa3")
    model = model.to(device, torch.bfloat16)
    sdpa = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="sdpa")
    sdpa = sdpa.to(device, torch.bfloat16)
    sdpa.load_state_dict(model.state_dict())
    flatten = DataCollatorWithFlattening(return_flash_attn_kwargs=True)

    def to_device(batch):
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    # The packed loss equals SDPA's on the padded batch (same tokens, same
    # labels; the padding masked and ignored).
    features = next(batches(vocab, 1, args.batch_size, seed=1))
    packed = to_device(flatten(features))
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    mask = torch.zeros(len(features), longest, dtype=torch.long)
    labels = torch.full((len(features), longest), -100)
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        ids[i, :n] = torch.tensor(f["input_ids"])
        mask[i, :n] = 1
        labels[i, 1:n] = ids[i, 1:n]  # the flattening collator drops each sequence's first label
    with torch.no_grad():
        packed_loss = model(**packed).loss.item()
        padded_loss = sdpa(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
    print(f"initial loss: fa3 packed {packed_loss:.4f}, SDPA padded {padded_loss.item():.4f}")
    assert abs(packed_loss - padded_loss.item()) < 2e-2 * max(1.0, abs(packed_loss)), "packed and padded differ"

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step, features in enumerate(batches(vocab, args.steps, args.batch_size, seed=2)):
        loss = model(**to_device(flatten(features))).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 5 == 0 or step == args.steps - 1:
            print(f"step {step:3d}: loss {loss.item():.4f}")
    # The task needs attention within each sequence: learning it shows the
    # packed backward reaches the weights.
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"mean loss of the first 5 steps {first:.3f}, of the last 5 {last:.3f}")
    assert args.steps < 40 or last < 0.8 * first, "the packed model did not learn"


if __name__ == "__main__":
    main()
