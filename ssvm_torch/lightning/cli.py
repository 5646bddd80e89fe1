"""The LightningCLI of ``python -m ssvm_torch.lightning fit --config recipes/ocr_small.yaml`` (and of
``python -m ssvm_torch.deep``): :func:`main`.

Every ``SSVMModule`` argument is ``--model.<name>``, every Trainer argument ``--trainer.<name>``;
TensorBoard logs go under the trainer's ``default_root_dir`` (lightning_logs/version_N), next to
``history.json`` and ``model.pt``. Resume with ``--ckpt_path <dir>/checkpoints/last.ckpt``: the
checkpoint's hyper-parameters are restored (so a killed run continues exactly), except those
given explicitly as ``--model.<name>`` flags (e.g. ``--model.passes 400`` to extend a finished run).
"""
from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import textwrap
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from jsonargparse import ArgumentError
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import TensorBoardLogger

from ..atomic import writes_so_far
from ..errors import EXIT_CODES, SSVMInputError, Terminated, interrupted_line
from .callbacks import INTERRUPTED, interrupt_signal
from .module import SSVMModule


# what this process claimed (version folders, and the folders created to hold them): a run refused
# before it trained removes them again (:func:`discard_claimed`)
_CLAIMED: list = []


def discard_claimed() -> None:
    """Remove the log folders this process claimed when they hold nothing but what a start writes
    (config.yaml, hparams.yaml, empty TensorBoard event files): a refused run leaves nothing behind."""
    start_files = ("config.yaml", "hparams.yaml")
    while _CLAIMED:
        folder = _CLAIMED.pop()
        if not folder.is_dir():
            continue
        files = list(folder.iterdir())
        if all(f.name in start_files or f.name.startswith("events.out.tfevents") for f in files):
            for f in files:
                f.unlink()
            folder.rmdir()
        else:
            break                                # something was written: keep this and what holds it


def claim_version(logs: Path) -> str:
    """Create and return the next free ``version_N`` under ``logs`` (``os.mkdir`` is atomic); a
    folder that cannot be created or written (read-only file system, a missing mount, a file in the
    way) is refused in one line naming ``trainer.default_root_dir``."""
    try:
        for folder in reversed([logs, *logs.parents]):
            if not folder.exists():
                folder.mkdir()
                _CLAIMED.append(folder)
        probe = logs / f".ssvm-write-probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise SSVMInputError(f"trainer.default_root_dir: cannot write logs at {e.filename or logs} "
                             f"({e.strerror or e})") from None
    taken = [int(p.name[8:]) for p in logs.glob("version_*") if p.name[8:].isdigit()]
    n = max(taken) + 1 if taken else 0
    while True:
        try:
            (logs / f"version_{n}").mkdir()
            _CLAIMED.append(logs / f"version_{n}")
            return f"version_{n}"
        except FileExistsError:
            n += 1


_ABSENT = object()


def _differs(a, b) -> bool:
    """A config value against a checkpoint's (lists and tuples alike)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) != list(b)
    return a != b


def _explicit_model_flags(argv: list[str]) -> list[str]:
    names = {a[len("--model."):].split("=", 1)[0] for a in argv if a.startswith("--model.")}
    return sorted(n[len("init_args."):] if n.startswith("init_args.") else n for n in names)


class SSVMCLI(LightningCLI):
    """LightningCLI with ``fit`` only (evaluation is part of every gap check; the history and model
    files hold it), explicit ``--model.*`` flags winning over a checkpoint's hyper-parameters."""

    default_module: str | None = None          # subclass mode: the module of a config without class_path

    @staticmethod
    def subcommands() -> dict:
        return {"fit": LightningCLI.subcommands()["fit"]}

    def add_arguments_to_parser(self, parser) -> None:
        if self.subclass_mode_model and self.default_module:
            parser.set_defaults({"model": {"class_path": self.default_module}})

    def _model_key(self, sub: str, name: str) -> str:
        return f"{sub}.model.init_args.{name}" if self.subclass_mode_model else f"{sub}.model.{name}"

    def _module_class(self, sub: str):
        if not self.subclass_mode_model:
            return self.model_class
        module, _, name = str(self.config[f"{sub}.model.class_path"]).rpartition(".")
        return getattr(importlib.import_module(module), name)

    def _check_checkpoint(self, sub: str) -> dict | None:
        """Refuse a ``--ckpt_path`` that is missing, damaged, or of another run: every hyper-parameter
        in the module's ``resume_identity`` (dataset, lambda, architecture, ...) must equal this
        run's, wherever this run's value came from (config file or command line) - the rule of
        ``ssvm-train --resume`` (:func:`ssvm_torch.outputs.load_checkpoint`). Returns the checkpoint's
        hyper-parameters (None without a ``--ckpt_path``)."""
        ckpt_path = self.config[sub].get("ckpt_path")
        if not ckpt_path:
            return
        path = Path(ckpt_path)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise SSVMInputError(f"ckpt_path: expected a Lightning checkpoint file (e.g. .../checkpoints/last.ckpt), "
                                 f"{path} {what}")
        try:
            saved = torch.load(path, weights_only=True, map_location="cpu").get("hyper_parameters", {})
        except Exception as e:          # truncated or foreign archives raise several types
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise SSVMInputError(f"ckpt_path: {path} is not a readable Lightning checkpoint ({type(e).__name__}: "
                                 f"{first}); resume from another checkpoint or start a new run") from None
        self._check_module_class(sub, path, saved.get("_class_path"))
        for key in getattr(self._module_class(sub), "resume_identity", ()):
            mine = self.config[self._model_key(sub, key)]
            if key in saved and saved[key] != mine:
                raise SSVMInputError(f"ckpt_path: {path} is a checkpoint of {key} = {saved[key]!r}, this run has "
                                     f"{key} = {mine!r}; resume with the checkpoint's value or start a new run")
        return saved

    def _check_module_class(self, sub: str, path: Path, saved_path) -> None:
        """A checkpoint of another LightningModule (its ``_class_path``, saved by the CLI) is refused
        naming both modules, before any hyper-parameter is compared."""
        if not saved_path:
            return
        mine = self._module_class(sub)
        module, _, name = str(saved_path).rpartition(".")
        try:
            theirs = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            theirs = None                            # a module path renamed since: compare by name
        if theirs is mine or (theirs is None and name == mine.__name__):
            return
        recipe = self.config[sub].get("config")
        given = f" (config {', '.join(str(c) for c in recipe)})" if recipe else ""
        raise SSVMInputError(f"ckpt_path: {path} is a checkpoint of the module {name} ({saved_path}); this run trains "
                             f"{mine.__name__} ({mine.__module__}.{mine.__name__}){given}; resume it with that "
                             f"module's recipe or start a new run")

    def _parse_ckpt_path(self) -> None:
        sub = self.config.get("subcommand")
        saved = (self._check_checkpoint(sub) or {}) if sub else {}
        argv = self._argv if self._argv is not None else sys.argv[1:]
        given = {k: self.config[self._model_key(sub, k)] for k in _explicit_model_flags(argv)} if sub else {}
        configured = {k: self._model_value(sub, k) for k in saved if not k.startswith("_")}
        super()._parse_ckpt_path()
        for k, v in given.items():          # explicit command-line flags win over the checkpoint's
            self.config[self._model_key(sub, k)] = v
        kept = [f"{k} = {saved[k]!r} (the config file: {v!r})" for k, v in configured.items()
                if k not in given and v is not _ABSENT and _differs(v, saved[k])]
        if kept:                            # the recipe was edited since: say which values the run goes on with
            print(f"ckpt_path: the resumed run keeps its checkpoint's {'; '.join(kept)}; a --model.<name> flag on "
                  "the command line changes one", file=sys.stderr, flush=True)

    def _model_value(self, sub: str, name: str):
        try:
            return self.config[self._model_key(sub, name)]
        except (KeyError, AttributeError):
            return _ABSENT

    def instantiate_trainer(self, **kwargs):
        """The default TensorBoard logger gets a version directory of its own: the checkpoint's when
        resuming (one run, one set of curves), else a fresh ``version_N`` claimed atomically (two
        runs started together under one root never share one)."""
        trainer = super().instantiate_trainer(**kwargs)
        sub = self.config.get("subcommand")
        cfg = self.config[sub] if sub else self.config
        if cfg["trainer"].get("logger") not in (None, True) or not isinstance(trainer.logger, TensorBoardLogger):
            return trainer                           # a logger the user configured is left alone
        root = Path(trainer.default_root_dir)
        ckpt = cfg.get("ckpt_path")
        version = None
        if ckpt and Path(ckpt).parent.name == "checkpoints":
            version = Path(ckpt).parent.parent.name
        if version is None:          # DDP's launcher re-runs this command for ranks > 0: they share rank 0's
            version = os.environ.get("SSVM_LOG_VERSION") or claim_version(root / "lightning_logs")
            os.environ["SSVM_LOG_VERSION"] = version
        trainer.logger = TensorBoardLogger(save_dir=str(root), name="lightning_logs", version=version,
                                           default_hp_metric=False)     # hp_metric: the result (log_hp_metrics)
        return trainer

    def before_fit(self) -> None:
        """The module's ``check_trainer(trainer)`` where it has one (the deep pipelines: deep/dev_selection.py),
        here in the launching process: a refused trainer setting costs no rank launched and no data loaded."""
        check_trainer = getattr(self.model, "check_trainer", None)
        if callable(check_trainer):
            check_trainer(self.trainer)

    def parse_arguments(self, parser, args) -> None:
        self._argv = list(args) if isinstance(args, (list, tuple)) else None
        super().parse_arguments(parser, args)


PROG = "python -m ssvm_torch.lightning"
MESSAGE_CHARS = 1000           # jsonargparse lists every candidate of a union: keep the line readable


def one_line(message: str) -> str:
    """A parser's message on one line: whitespace collapsed, and past MESSAGE_CHARS shortened at a word
    boundary with a marker (never cut inside a word)."""
    text = " ".join(message.split())
    return text if len(text) <= MESSAGE_CHARS else textwrap.shorten(text, MESSAGE_CHARS, placeholder=" [...]")


def _input_error_in(exc: BaseException) -> SSVMInputError | None:
    """The SSVMInputError an exception was raised from (its __cause__ / __context__ chain), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, SSVMInputError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class _NoAdvert(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


@contextmanager
def quiet_lightning():
    """Drop Lightning's noise for this command only: its litlogger advertisement and the FutureWarning
    its own pytree helper triggers in torch (``isinstance(treespec, LeafSpec)``); neither is about
    the user's run."""
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    advert = _NoAdvert()
    log.addFilter(advert)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
            yield
    finally:
        log.removeFilter(advert)


def main(args=None, module=SSVMModule, prog: str = PROG, max_epochs: int = -1, default_module: str | None = None) -> int:
    """Run the CLI on ``module`` (``SSVMModule`` here); with ``default_module`` (the import path of a
    LightningModule) the CLI runs in subclass mode: the config's ``model.class_path`` picks the module,
    a config without one gets ``default_module`` (``python -m ssvm_torch.deep``). Errors become one
    line on stderr and exit status 2."""
    cli = SSVMCLI if default_module is None else type("SSVMSubclassCLI", (SSVMCLI,), {"default_module": default_module})
    _CLAIMED.clear()
    INTERRUPTED.clear()
    # SIGTERM like Ctrl-C: an exception, so that a stop at start-up releases what it holds and says so in one
    # line; during fit Lightning composes this handler with its own and the fit's interrupt hooks keep its work
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    mark = writes_so_far()
    try:
        # no progress bar by default: the loops print their own lines (an SSVM run's epoch count is open,
        # max_epochs = -1, so the bar would read "Epoch 3/-2"); --trainer.enable_progress_bar true brings it
        with quiet_lightning():
            cli(module, subclass_mode_model=default_module is not None, save_config_kwargs={"overwrite": True},
                trainer_defaults={"max_epochs": max_epochs, "num_sanity_val_steps": 0, "enable_progress_bar": False},
                args=args, parser_kwargs={"prog": prog, "exit_on_error": False})
    except SSVMInputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        discard_claimed()
        return 2
    except ValueError as e:                        # subclass mode: jsonargparse wraps the module's own error
        cause = _input_error_in(e)
        if cause is None:
            raise
        print(f"{prog}: error: {cause}", file=sys.stderr)
        discard_claimed()
        return 2
    except ArgumentError as e:                     # a bad flag or value: one line, not the usage dump
        print(f"{prog}: error: {one_line(str(e))}", file=sys.stderr)
        discard_claimed()
        return 2
    except MisconfigurationException as e:         # e.g. --trainer.accelerator gpu without a GPU
        print(f"{prog}: error: trainer: {e}", file=sys.stderr)
        discard_claimed()
        return 2
    except (NotADirectoryError, FileExistsError, PermissionError) as e:
        print(f"{prog}: error: trainer.default_root_dir: cannot write logs at {e.filename} ({e.strerror})",
              file=sys.stderr)
        discard_claimed()
        return 2
    except (KeyboardInterrupt, Terminated, SystemExit) as e:
        # an interrupted fit: Lightning ran its interrupt hooks (KeepWorkOnInterrupt wrote what the run finished)
        # and exits (1 after Ctrl-C, 0 after SIGTERM); or a stop at start-up, before any fit ran
        sig = INTERRUPTED.get("signal") or interrupt_signal(e)
        if sig is None:                        # a plain SystemExit (e.g. --help): as it was
            raise
        line = INTERRUPTED.get("line") or interrupted_line(sig, mark)
        sys.stderr.write(f"{prog}: {line}\n")
        sys.stderr.flush()
        return EXIT_CODES[sig]
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0


def _terminate(signum, frame):
    raise Terminated()

