"""What the commands share: their parser's head (``--dataset``, ``--data-dir``) and the entry point
that runs a parsed command inside its ``--data-dir`` with the one-line error handling of
:func:`ssvm_torch.errors.run_cli`."""
from __future__ import annotations

import argparse

from ..data.types import data_folder
from ..errors import run_cli
from ..tasks import TASKS, get_task


def return_freed_memory(threshold: int = 4 << 20) -> bool:
    """Make glibc's malloc serve blocks of ``threshold`` bytes and more by mmap, so they go back to the
    system when freed. By default glibc raises that threshold to 32 MB after the first large free, and
    the 4-32 MB temporaries of the exact gap checks then stay in its heap, fragmented: CoNLL's default
    run grew by ~120 MB over 30 passes. A process-wide setting, made by the commands only; False where
    the C library is not glibc."""
    try:
        import ctypes
        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, int(threshold)))      # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def run_command(prog: str, run, args) -> int:
    """``run(args)`` with the datasets read from ``args.data_dir`` (or the default folder); exit code 2
    with one line for bad input, 130 for an interrupted run, else 0."""
    return_freed_memory()

    def in_data_dir(a):
        with data_folder(a.data_dir):
            return run(a)
    return run_cli(prog, in_data_dir, args)


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A command's parser with the options every command has: ``--dataset`` and ``--data-dir``."""
    p = argparse.ArgumentParser(prog=prog, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                description=description)
    p.add_argument("--dataset", default="ocr-small", help=f"one of {', '.join(TASKS)}")
    p.add_argument("--data-dir", default=None,
                   help="folder of the datasets (a copy of the repository's datasets/); None = $SSVM_TORCH_DATA, "
                        "else the source checkout's datasets/")
    return p


def task_options(args) -> dict:
    """The featurization of ``ssvm-train``'s task: the options given, the task's recommended configuration for the
    others (checked by the task)."""
    return get_task(args.dataset).options(features=args.features, min_count=args.min_count, loss=args.loss,
                                          constraints=args.constraints, tags=args.tags, trees=args.trees,
                                          siblings=args.sibling_features, inference=args.graph_inference)
