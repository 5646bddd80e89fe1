"""Lightning loop, TensorBoard monitoring, exact checkpoint/resume and LightningCLI for the SSVM solvers.

``python -m ssvm_torch.lightning fit --config recipes/ocr_small.yaml``
"""
from .callbacks import GapCheck
from .checkpoint_io import AtomicCheckpointIO
from .data import BlockChunks, LiveBlockSampler, LiveChunk, block_loader
from .module import BlockFrankWolfe, SSVMModule

__all__ = ["SSVMModule", "BlockFrankWolfe", "GapCheck", "AtomicCheckpointIO", "BlockChunks", "LiveBlockSampler",
           "LiveChunk", "block_loader"]
