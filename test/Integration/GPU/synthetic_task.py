"""The synthetic next-token task the GPU training tests learn, and the
moving average their loss-curve bounds compare."""

import torch


def tokens(vocab, seq, batch, steps, seed):
    """[steps, batch, seq + 1] tokens (CPU): a fixed random permutation of the
    token two positions back gives the next token (x[t+1] = perm[x[t-1]])
    except for 10% uniform noise, so a model must learn to attend to the
    previous position. The same for every run of a seed."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(vocab, generator=gen)
    n = steps * batch
    seqs = [torch.randint(vocab, (n,), generator=gen) for _ in range(2)]
    for _ in range(seq - 1):
        noise = torch.rand(n, generator=gen) < 0.1
        seqs.append(torch.where(noise, torch.randint(vocab, (n,), generator=gen), perm[seqs[-2]]))
    return torch.stack(seqs, 1).view(steps, batch, seq + 1)


def moving_average(xs, n=10):
    """The mean of each value with up to n - 1 before it."""
    return [sum(xs[max(0, i - n + 1):i + 1]) / len(xs[max(0, i - n + 1):i + 1]) for i in range(len(xs))]
