"""What the deep pipelines (OCR / pose in ocr_module.py, CoNLL in conll_chunker.py) share about an
epoch: its seed, the permutation its data loader draws, and one manual optimization step."""
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
