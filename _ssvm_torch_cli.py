"""Console entry points of ``ssvm-train``, ``ssvm-path``, ``ssvm-deep`` (``python -m ssvm_torch.deep``) and
``ssvm-parse`` (``python -m ssvm_torch.deep.ud_parse``). The command's module is imported inside
a guard: a Ctrl-C while Python imports torch and the package (the first seconds of every run) ends in
one line and exit status 130, like a Ctrl-C at any later moment (ssvm_torch.errors.run_cli).

During the import a Ctrl-C must not raise KeyboardInterrupt: it can land in Python code that a C++
extension's initialisation calls (torch binds its modules with pybind11), where the exception is turned
into a C++ one thrown through code that cannot unwind, and the process aborts (SIGABRT, "terminate
called after throwing an instance of 'pybind11::error_already_set'"). The handler here says so in one
line and ends the process at once instead: nothing has been written that early."""
import importlib
import os
import signal
import sys


def _exit_while_starting(prog: str):
    def handler(signum, frame):
        sys.stderr.write(f"{prog}: interrupted (Ctrl-C) while starting; nothing was written\n")
        sys.stderr.flush()
        os._exit(130)
    return handler


def _run(prog: str, module: str) -> int:
    # An ignored SIGINT (a command started with `nohup` or in the background by some shells) stays ignored.
    guard = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if guard:
        signal.signal(signal.SIGINT, _exit_while_starting(prog))
    try:
        main = importlib.import_module(module).main
    finally:
        if guard:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return main()


def train() -> None:
    sys.exit(_run("ssvm-train", "ssvm_torch.cli.train"))


def path() -> None:
    sys.exit(_run("ssvm-path", "ssvm_torch.cli.path"))


def deep() -> None:
    sys.exit(_run("ssvm-deep", "ssvm_torch.deep.__main__"))


def parse() -> None:
    sys.exit(_run("ssvm-parse", "ssvm_torch.deep.ud_parse"))
