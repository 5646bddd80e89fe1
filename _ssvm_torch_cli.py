"""Console entry points of ``ssvm-train`` and ``ssvm-path``. The command's module is imported inside
a guard: a Ctrl-C while Python imports torch and the package (the first seconds of every run) ends in
one line and exit status 130, like a Ctrl-C at any later moment (ssvm_torch.errors.run_cli)."""
import importlib
import sys


def _run(prog: str, module: str) -> int:
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr)
        return 130
    return main()


def train() -> None:
    sys.exit(_run("ssvm-train", "ssvm_torch.cli.train"))


def path() -> None:
    sys.exit(_run("ssvm-path", "ssvm_torch.cli.path"))
