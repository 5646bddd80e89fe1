"""LightningCLI entry point: ``python -m ssvm_torch.lightning fit --config recipes/ocr_small.yaml``.

Every ``SSVMModule`` argument is ``--model.<name>``, every Trainer argument ``--trainer.<name>``;
TensorBoard logs go under the trainer's ``default_root_dir`` (lightning_logs/version_N), next to
``history.json`` and ``model.pt``. Resume with ``--ckpt_path <dir>/checkpoints/last.ckpt``: the
checkpoint's hyper-parameters are restored (so a killed run continues exactly), except those
given explicitly as ``--model.<name>`` flags (e.g. ``--model.passes 400`` to extend a finished run).
"""
from __future__ import annotations

import sys

from lightning.pytorch.cli import LightningCLI

from ..errors import SSVMInputError
from .module import SSVMModule


def _explicit_model_flags(argv: list[str]) -> list[str]:
    return sorted({a[len("--model."):].split("=", 1)[0] for a in argv if a.startswith("--model.")})


class SSVMCLI(LightningCLI):
    def _parse_ckpt_path(self) -> None:
        sub = self.config.get("subcommand")
        argv = self._argv if self._argv is not None else sys.argv[1:]
        given = {k: self.config[f"{sub}.model.{k}"] for k in _explicit_model_flags(argv)} if sub else {}
        super()._parse_ckpt_path()
        for k, v in given.items():          # explicit command-line flags win over the checkpoint's
            self.config[f"{sub}.model.{k}"] = v

    def parse_arguments(self, parser, args) -> None:
        self._argv = list(args) if isinstance(args, (list, tuple)) else None
        super().parse_arguments(parser, args)


def main(args=None) -> int:
    try:
        SSVMCLI(SSVMModule, save_config_kwargs={"overwrite": True},
                trainer_defaults={"max_epochs": -1, "num_sanity_val_steps": 0}, args=args)
    except SSVMInputError as e:
        print(f"ssvm_torch.lightning: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
