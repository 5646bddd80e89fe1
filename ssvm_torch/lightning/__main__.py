"""``python -m ssvm_torch.lightning``: :func:`ssvm_torch.lightning.cli.main`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
