"""What the deep pipelines (OCR / pose in ocr_module.py, CoNLL in conll_chunker.py, UD in ud_parser.py) share
about an epoch: its seed, the permutation its data loader draws (or its batches of similar-length sentences),
and one manual optimization step."""
from __future__ import annotations

import torch
import torch.utils.data as tud


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of everything random in one epoch (order, augmentation, dropout): a function of the run's
    seed and the epoch alone, so a run resumed at an epoch boundary draws what the uninterrupted run drew."""
    return (int(seed) * 1_000_003 + int(epoch)) % (2 ** 63)


class EpochPermutation(tud.Sampler):
    """A permutation of range(n) per epoch, drawn from :func:`epoch_seed` (Lightning calls ``set_epoch``)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch)))
                    .tolist())


class LengthPooledBatches(tud.Sampler):
    """Batches of sentences of similar length, drawn per epoch: the epoch's :class:`EpochPermutation`
    (``self.sampler``, which Lightning's ``set_epoch`` reaches) cut into pools of ``pool`` x ``batch_size``
    sentences, each pool sorted by length (ties in the permutation's order) and cut into batches of
    ``batch_size``, the epoch's batches then shuffled (a draw of the same epoch seed). The bucketing of
    neural parsers' trainers (Dozat & Manning 2017; SuPar's length buckets) in the pooled form that keeps
    the batch size, hence the steps per epoch and the per-sentence loss scale, of random batches: what
    changes is the padding, which the N^2 arc and N^3 sibling scores pay for. A function of (seed, epoch)
    alone, like the permutation, so a resumed run draws the uninterrupted run's batches."""

    def __init__(self, lengths: torch.Tensor, batch_size: int, pool: int, seed: int):
        if not (isinstance(pool, int) and pool >= 1):
            raise ValueError(f"pool: expected an int >= 1 (batches per pool), got {pool!r}")
        self.lengths = torch.as_tensor(lengths).reshape(-1)
        self.batch_size, self.pool = batch_size, pool
        self.sampler = EpochPermutation(len(self.lengths), seed)

    def __len__(self) -> int:
        span, n = self.pool * self.batch_size, len(self.lengths)
        full, rest = divmod(n, span)
        return full * self.pool + -(-rest // self.batch_size)

    def __iter__(self):
        # a generator: the draw happens at the first batch, after Lightning's set_epoch (a resumed fit makes the
        # loader's iterator before it sets the epoch; torch's BatchSampler over EpochPermutation is lazy too)
        order = torch.tensor(list(self.sampler), dtype=torch.int64)
        span, batches = self.pool * self.batch_size, []
        for start in range(0, len(order), span):
            chunk = order[start:start + span]
            chunk = chunk[torch.sort(self.lengths[chunk], stable=True).indices]
            batches += [chunk[i:i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        gen = torch.Generator().manual_seed((epoch_seed(self.sampler.seed, self.sampler.epoch) + 1) % (2 ** 63))
        for i in torch.randperm(len(batches), generator=gen).tolist():
            yield batches[i]


def batch_padding(batches: list, lengths: torch.Tensor) -> dict:
    """What ``batches`` (lists of sentence indices, sentences of ``lengths`` words) cost padded to their longest
    sentence (+ 1 for the root), over what the sentences themselves hold: ``padded_tokens`` (the encoder's work)
    and ``padded_n2`` (the (n + 1)^2 arc scores')."""
    width = torch.tensor([int(lengths[b].max()) + 1 for b in batches], dtype=torch.float64)
    count = torch.tensor([len(b) for b in batches], dtype=torch.float64)
    real = lengths.double() + 1
    return {"padded_tokens": float((count * width).sum() / real.sum()),
            "padded_n2": float((count * width ** 2).sum() / (real ** 2).sum())}


def epoch_mean(module, total: float, batches: int) -> float:
    """The mean batch loss of an epoch: ``total / batches`` over every rank's batches under DDP (one
    all-reduce of the two numbers), the process's own otherwise."""
    strategy = module.trainer.strategy
    if module.trainer.world_size > 1:
        both = strategy.reduce(torch.tensor([float(total), float(batches)], dtype=torch.float64, device=module.device),
                               reduce_op="sum")
        total, batches = float(both[0]), int(both[1])
    return total / max(1, batches)


def manual_step(module, loss: torch.Tensor, optimizers, clip=None) -> float:
    """One step of manual optimization on ``module`` (a LightningModule): zero the gradients, backward
    through Lightning (``manual_backward``), clip the gradient norm of ``clip`` = (parameters, max
    norm) if given, step every optimizer. Returns the loss as a float for the epoch's running mean."""
    for opt in optimizers:
        opt.zero_grad()
    module.manual_backward(loss)
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(*clip)
    for opt in optimizers:
        opt.step()
    return float(loss.detach())
