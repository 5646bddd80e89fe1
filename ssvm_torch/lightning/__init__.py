"""Lightning loop, TensorBoard monitoring, exact checkpoint/resume and LightningCLI for the SSVM solvers.

``python -m ssvm_torch.lightning fit --config recipes/ocr_small.yaml``
"""
from .callbacks import (INTERRUPTED, GapCheck, KeepWorkOnInterrupt, interrupt_signal, log_hp_metrics,
                        save_last_checkpoint)
from .checkpoint_io import AtomicCheckpointIO, seal, unseal
from .cli import main as cli_main
from .data import BlockChunks, LiveBlockSampler, LiveChunk, block_loader
from .module import BlockFrankWolfe, SSVMModule, run_output_dir

__all__ = ["SSVMModule", "BlockFrankWolfe", "GapCheck", "AtomicCheckpointIO", "BlockChunks", "LiveBlockSampler",
           "LiveChunk", "block_loader", "cli_main", "log_hp_metrics", "run_output_dir", "save_last_checkpoint", "seal",
           "unseal", "INTERRUPTED", "KeepWorkOnInterrupt", "interrupt_signal"]
