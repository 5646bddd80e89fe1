"""``python -m ssvm_torch.deep fit --config recipes/ocr_deep_alternating.yaml``: the CNN + SSVM
pipelines of :mod:`ssvm_torch.deep.chain_module` under the same LightningCLI as ``ssvm_torch.lightning``
(``--model.<name>``, ``--trainer.<name>``; TensorBoard logs under the trainer's default_root_dir)."""
from __future__ import annotations

import sys

from ..lightning.__main__ import main as cli_main
from .chain_module import DeepChainModule


def main(args=None) -> int:
    return cli_main(args, module=DeepChainModule, prog="python -m ssvm_torch.deep", max_epochs=10)


if __name__ == "__main__":
    sys.exit(main())
