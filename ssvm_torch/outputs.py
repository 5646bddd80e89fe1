"""The one run-output format, shared by ``ssvm-train``, ``ssvm-path``, the Lightning module and the
estimator.

A run directory holds
  history.json   one record per exact gap check (:mod:`ssvm_torch.solvers.history`)
  test_predictions.json  the final model's decoded test split, in each task's terms (ssvm_torch/task_predictions.py)
  model.pt       {"w": float64 (d,), "ell": float, "lam": float, "dataset": str, "feature_layout": dict}
                 (+ "w_dual": float64 (d,), "radius": float for the dual extragradient)
  checkpoint.pt  {"format": CHECKPOINT_FORMAT, "solver": packed solver state} (resumable; its mostly-zero
                 tensors stored sparse, exactly: :func:`ssvm_torch.portable.pack`)
  path.pt / path.json   the regularization path (``ssvm-path``)

Every ``.pt`` file is a torch zip archive of tensors and primitives (numpy arrays and active sets
are packed by :mod:`ssvm_torch.portable`), read back with ``torch.load(..., weights_only=True)``:
loading a file never runs code from it. Each carries a manifest (``__manifest__``: the SHA-256 of
its content, tensors' bytes, dtypes and shapes included) that is verified on load, because torch
does not check the archive's CRCs: a file with flipped bytes is refused by name. Every file is written to a temporary name in the same
directory, fsynced and renamed over the target (``os.replace``), so a killed run leaves the
previous version intact, never a truncated one.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from .atomic import atomic_write, atomic_write_bytes
from .errors import SSVMInputError, human_bytes
from .portable import pack, unpack
from .version import __version__

CHECKPOINT_FORMAT = "ssvm_torch.checkpoint/1"
MANIFEST = "__manifest__"


def content_digest(obj) -> str:
    """SHA-256 of a (packed) object: every tensor's dtype, shape and bytes, every key and primitive,
    in a fixed order."""
    h = hashlib.sha256()

    def walk(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu()
            t = (t.to_dense() if t.layout != torch.strided else t).contiguous().reshape(-1)
            h.update(f"T{x.dtype}{tuple(x.shape)}".encode())
            h.update(memoryview(t.view(torch.uint8).numpy()) if t.numel() else b"")   # no byte copy of w
        elif isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=repr):
                h.update(repr(k).encode())
                walk(x[k])
            h.update(b"}")
        elif isinstance(x, (list, tuple)):
            h.update(b"[")
            for v in x:
                walk(v)
            h.update(b"]")
        else:
            h.update(repr(x).encode())
    walk(obj)
    return h.hexdigest()


def save_torch(path, obj: dict, sparse: bool = False) -> Path:
    """``torch.save`` of packed ``obj`` (``sparse``: its mostly-zero tensors as index / value pairs,
    :func:`ssvm_torch.portable.pack`) with its content manifest, atomically."""
    packed = pack(obj, sparse)
    packed[MANIFEST] = {"sha256": content_digest(packed)}
    return atomic_write(path, lambda f: torch.save(packed, f))


def load_torch(path, what: str = "file", noun: str = "an ssvm_torch", packed: tuple = ()):
    """A file written by :func:`save_torch`, loaded with ``weights_only=True`` and unpacked (but the top-level
    entries named in ``packed``, left as written: a regularization path's W, read row by row); a missing or damaged
    file raises :class:`SSVMInputError` naming the field ``what``."""
    path = Path(path)
    if not path.is_file():
        raise SSVMInputError(f"{what}: expected {noun} file, {path} "
                             f"{'is a directory' if path.is_dir() else 'does not exist'}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:          # torch raises several types for truncated / foreign archives
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise SSVMInputError(f"{what}: {path} is not a readable ssvm_torch file ({type(e).__name__}: {first[:200]})") \
            from None
    if not isinstance(obj, dict):
        raise SSVMInputError(f"{what}: {path} holds a {type(obj).__name__}, expected an ssvm_torch file (a dict)")
    manifest = obj.pop(MANIFEST, None)
    if manifest is None:
        warnings.warn(f"{path} has no content manifest (written before manifests existed): not verified", stacklevel=2)
    elif not isinstance(manifest, dict) or manifest.get("sha256") != content_digest(obj):
        raise SSVMInputError(f"{what}: {path} is damaged: its content does not match the SHA-256 of its manifest "
                             "(flipped or truncated bytes); use another copy or rerun")
    kept = {k: obj.pop(k) for k in packed if k in obj}
    return {**unpack(obj), **kept}


def device_record(device) -> dict:
    """Where a run computed, for its config.json: torch's device type and version and, on CUDA, the GPU's
    name (a run trained on a GPU is archived beside CPU runs and must say so: issue 74)."""
    device = torch.device(device)
    record = {"type": device.type, "torch": torch.__version__}
    if device.type == "cuda":
        record["name"] = torch.cuda.get_device_name(device)
    return record


def save_history(out, history: list) -> Path:
    return atomic_write_bytes(Path(out) / "history.json", json.dumps(history, indent=1).encode())


def save_rank_profiles(out, profiles: list) -> Path:
    """ranks.json: where each rank of a torchrun run spent its seconds (ssvm_torch.distributed.rank_profiles)."""
    return atomic_write_bytes(Path(out) / "ranks.json", json.dumps(profiles, indent=1).encode())


#: the room kept for test_predictions.json before a run starts (UD English-EWT's heads and relations: 0.4 MB)
PREDICTIONS_BYTES = 1 << 22


def save_predictions(out, predictions: dict) -> Path:
    """test_predictions.json: the model's decoded test split (:mod:`ssvm_torch.task_predictions`: letters, tags,
    segments, label sets, node labels, joints, links, heads, spans), in the split's order."""
    return atomic_write_bytes(Path(out) / "test_predictions.json", json.dumps(predictions).encode())


def save_selection(out, selection: dict) -> Path:
    """selection.json: the lambda selection on the development split (ssvm_torch.selection)."""
    return atomic_write_bytes(Path(out) / "selection.json", json.dumps(selection, indent=1).encode())


def save_model(out, w: torch.Tensor, ell: float, lam: float, dataset: str, layout: dict,
               extras: dict | None = None) -> Path:
    """model.pt: the weights (float64, CPU) with what is needed to use them, and the solver's
    ``model_extras`` (the dual extragradient: ``w_dual``, ``radius``)."""
    more = {k: v.detach().to("cpu", torch.float64) if torch.is_tensor(v) else float(v)
            for k, v in (extras or {}).items()}
    return save_torch(Path(out) / "model.pt", {"w": w.detach().to("cpu", torch.float64), "ell": float(ell),
                                               "lam": float(lam), "dataset": dataset, "feature_layout": layout,
                                               **more})


def load_model(path) -> dict:
    return load_torch(path, "model", "a model.pt")


def save_checkpoint(path, solver_state: dict, run: dict | None = None) -> Path:
    """checkpoint.pt: the solver state and ``run``, what it belongs to (dataset, dtype, n, d, ...). Its mostly-zero
    tensors (a chain store's block statistics, the weights of a large feature space) are stored sparse, exactly."""
    return save_torch(path, {"format": CHECKPOINT_FORMAT, "solver": solver_state, "run": run or {}}, sparse=True)


def load_checkpoint(path, run: dict | None = None) -> dict:
    """The solver state of a checkpoint written by :func:`save_checkpoint`; with ``run``, every key
    both record must agree (a checkpoint of another dataset, dtype or size is refused by name)."""
    ck = load_torch(path, "resume", "a checkpoint")
    if ck.get("format") != CHECKPOINT_FORMAT or not isinstance(ck.get("solver"), dict):
        raise SSVMInputError(f"resume: expected an ssvm_torch checkpoint ({CHECKPOINT_FORMAT}), {path} is not one")
    saved = ck.get("run") or {}
    run = run or {}
    for key, value in run.items():
        if key in saved and saved[key] != value:
            if key in ("world_size", "exchange", "round_steps"):      # how the run was spread: both sides in full
                def how(r):
                    p = r.get("world_size", 1)
                    return (f"{p} rank{'s' if p != 1 else ''} with exchange {r.get('exchange', 'none')}"
                            + (f", {r['round_steps']} steps per round" if r.get("round_steps") is not None else ""))
                raise SSVMInputError(f"resume: {path} was written by {how(saved)}; this run has {how(run)}: resume with "
                                     "the same torchrun --nproc-per-node and --exchange (and --round-steps), or start "
                                     "a new run")
            raise SSVMInputError(f"resume: {path} is a checkpoint of {key} = {saved[key]!r}, this run has "
                                 f"{key} = {value!r}")
    return ck["solver"]


RUN_FILES = ("config.json", "history.json", "model.pt", "checkpoint.pt", "path.pt", "path.json", "selection.json",
             "latent.json", "hidden.json")
LOCK = ".ssvm-run.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # alive, owned by someone else
        return True
    return True


class RunDir:
    """The output directory of one run, checked before any training so that no work is lost at the
    end: ``out`` must be a creatable, writable directory; a directory that already holds a run (any
    of :data:`RUN_FILES`) is refused unless ``overwrite`` (its run files are then removed when the new
    run writes its first file, :meth:`write_config`, so no file of the earlier run stays beside the
    new ones and a run refused before that leaves them all) or unless the run resumes from a
    checkpoint inside it; stale temporary files of killed writes are removed; a lock file makes a
    second concurrent run in the same directory fail at once. Use as a context manager: it releases
    the lock, and a run that fails before writing anything leaves no directory it created."""

    def __init__(self, out, overwrite: bool = False, resume=None, field: str = "out"):
        if out is None or str(out).strip() == "":
            raise SSVMInputError(f"{field}: expected a directory path, got an empty string")
        self.path = Path(out)
        if self.path.exists() and not self.path.is_dir():
            raise SSVMInputError(f"{field}: expected a directory, {self.path} is an existing file")
        self.created = not self.path.exists()
        self.replaced: list = []                       # the earlier run's files, removed at the first write
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".ssvm-write-probe.", dir=self.path)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise SSVMInputError(f"{field}: cannot write into {self.path} ({e.strerror or e})") from None
        self._lock()
        try:
            resuming = resume is not None and Path(resume).resolve().parent == self.path.resolve()
            held = [f for f in RUN_FILES if (self.path / f).exists()]
            if held and not (overwrite or resuming):
                ckpt = self.path / "checkpoint.pt"     # a hint names only a file that exists
                more = f", or --resume {ckpt} to continue it" if ckpt.is_file() else ""
                raise SSVMInputError(f"{field}: {self.path} already holds a run ({', '.join(held)}); pass --overwrite "
                                     f"to replace it{more}")
            if held and overwrite and not resuming:
                self.replaced = held
            for stale in self.path.glob(".*.tmp"):       # temp files of writes killed midway
                stale.unlink(missing_ok=True)
        except BaseException:
            self._close(failed=True)
            raise

    def _lock(self) -> None:
        lock = self.path / LOCK
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(lock.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and _pid_alive(pid):
                    raise SSVMInputError(f"out: {self.path} is in use by another run (process {pid}, lock file "
                                         f"{lock}); choose another --out") from None
                lock.unlink(missing_ok=True)             # the lock of a run that died
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            self.locked = True
            return
        raise SSVMInputError(f"out: could not lock {self.path} ({lock})")

    def release(self) -> None:
        if getattr(self, "locked", False):
            (self.path / LOCK).unlink(missing_ok=True)
            self.locked = False

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._close(failed=exc_type is not None)

    def _close(self, failed: bool) -> None:
        self.release()
        if failed and self.created:                    # a refused run leaves no directory of its own
            try:
                self.path.rmdir()                      # only if nothing was written into it
            except OSError:
                pass

    def require_free(self, nbytes: int, what: str, grows_to: int | None = None) -> None:
        """Refuse to start when the disk cannot hold ``what`` (``nbytes``, with a 20% margin). ``grows_to``: the most
        it can take later (a sparse checkpoint filling in up to its dense state): below that, one line on stderr
        says so (a full disk mid-run stops the run with its last good checkpoint)."""
        import shutil
        free = shutil.disk_usage(self.path).free
        if free < 1.2 * nbytes:
            raise SSVMInputError(f"out: {self.path} has {human_bytes(free)} free, {what} needs about "
                                 f"{human_bytes(1.2 * nbytes)}")
        if grows_to is not None and free < 1.2 * grows_to:
            print(f"note: {self.path} has {human_bytes(free)} free; {what} takes {human_bytes(nbytes)} now and can grow "
                  f"to {human_bytes(grows_to)} as the run fills it in (a full disk stops the run with its last good "
                  "one)", file=sys.stderr, flush=True)

    def begin(self, keep=()) -> None:
        """The new run writes its first file: with ``overwrite``, the earlier run's files go now
        (but ``keep``, which the caller replaces atomically)."""
        for f in self.replaced:
            if f not in keep:
                (self.path / f).unlink(missing_ok=True)
        self.replaced = []

    def write_config(self, config: dict) -> Path:
        """config.json: what the run was (dataset, lambda, seed, solver options, ...) and with what
        (package versions, git revision). The run's first file: with ``overwrite``, the earlier run's
        files go now, once every check of the new run has passed."""
        self.begin(keep=("config.json",))               # replaced atomically below
        return atomic_write_bytes(self.path / "config.json",
                                  json.dumps({**config, "environment": environment()}, indent=1).encode())


def environment() -> dict:
    """Versions of the packages a result depends on, and the source's git revision if known."""
    import platform
    import subprocess

    import numba
    import numpy

    rev = None
    try:
        root = Path(__file__).resolve().parents[1]
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        rev = r.stdout.strip() or None if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"ssvm_torch": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
            "numba": numba.__version__, "python": platform.python_version(), "git_revision": rev}
