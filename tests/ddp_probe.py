"""A Lightning callback for tests/test_deep_ddp.py: at optimization step ``$SSVM_TORCH_PROBE_STEP`` (0 =
the first) of a run it writes
what each rank saw -- its batch, the module's weights before the step, the gradients after the
backward (under DDP: after the all-reduce) and the module's hyperparameters -- to
``$SSVM_TORCH_PROBE_DIR/rank<r>.pt``."""
from __future__ import annotations

import os

import lightning.pytorch as L
import torch


class GradientProbe(L.Callback):
    def __init__(self):
        self.batch, self.done = None, False

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == int(os.environ.get("SSVM_TORCH_PROBE_STEP", "0")):
            self.batch = batch.detach().cpu().clone()
            self.weights = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    def on_after_backward(self, trainer, module):
        if self.done or self.batch is None:
            return
        grads = {name: (p.grad.to_dense() if p.grad.is_sparse else p.grad).detach().cpu().clone()
                 for name, p in module.named_parameters() if p.grad is not None}
        torch.save({"batch": self.batch, "weights": self.weights, "grads": grads, "hparams": dict(module.hparams),
                    "world_size": trainer.world_size},
                   os.path.join(os.environ["SSVM_TORCH_PROBE_DIR"], f"rank{trainer.global_rank}.pt"))
        self.done = True
