"""``python -m ssvm_torch.deep fit --config recipes/<recipe>.yaml``: the deep pipelines under the same
LightningCLI as ``ssvm_torch.lightning`` (``--model.<name>``, ``--trainer.<name>``; TensorBoard logs
under the trainer's default_root_dir). The recipe's ``model.class_path`` picks the module (subclass
mode): :class:`ssvm_torch.deep.ConllChunker` (``recipes/conll_deep_*.yaml``) or
:class:`ssvm_torch.deep.DeepChainModule`, the CNN + SSVM pipelines on OCR, which a recipe without a
class_path gets (``recipes/ocr_deep_*.yaml``)."""
from __future__ import annotations

import sys

import lightning as L

from ..lightning import cli_main
# imported here, not on first use (ssvm_torch.deep imports its names lazily): LightningCLI knows a module by its
# short name (--model UDParser) only once its class exists
from .conll_chunker import ConllChunker  # noqa: F401
from .ocr_module import DeepChainModule  # noqa: F401
from .ud_parser import UDParser  # noqa: F401

DEFAULT_MODULE = "ssvm_torch.deep.DeepChainModule"


def main(args=None) -> int:
    return cli_main(args, module=L.LightningModule, prog="python -m ssvm_torch.deep", max_epochs=10,
                    default_module=DEFAULT_MODULE)


if __name__ == "__main__":
    sys.exit(main())
