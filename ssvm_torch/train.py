"""``python -m ssvm_torch.train`` (the command line of earlier releases): runs ``ssvm-train``,
which lives in :mod:`ssvm_torch.cli.train`."""
import sys

from .cli.train import main

if __name__ == "__main__":
    sys.exit(main())
