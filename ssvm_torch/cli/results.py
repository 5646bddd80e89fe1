"""What ``ssvm-train`` evaluates and writes around a run: the records' evaluation at every k-th exact check
(``--eval-every``), the final record's evaluation of the returned model, history.json and model.pt (rescued
into a temporary directory when the run directory cannot take them), and a torchrun run's last certified
point when a peer dies."""
from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import SSVMInputError
from ..outputs import save_history, save_model, save_predictions


def print_test_figures(last: dict, task) -> None:
    """The run's test figures, as every ssvm-train run prints them: the error and the position error, then the
    task's own (labeled bracket F1, chunk F1, UAS / LAS) where its records hold them."""
    print(f"test error: {last['test_error']:.4f} ({task.error_name}); "
          f"{task.position_name}: {last['test_position_error']:.4f}")
    if "test_unlabeled_f1" in last:
        print(f"test labeled bracket F1: {last['test_f1']:.2f}, unlabeled: {last['test_unlabeled_f1']:.2f} "
              "(debinarized trees, evalb's counts: one-word spans not counted)")
    elif "test_f1" in last:
        print(f"test chunk F1: {last['test_f1']:.2f}")
    if "test_uas" in last:
        print(f"test UAS: {last['test_uas']:.2f}, LAS: {last['test_las']:.2f} (every word, punctuation included; "
              "LAS on the universal relations)")


def every_kth_check(evaluate, every: int, records):
    """``evaluate`` (w -> the task's errors) at the exact checks whose index is a multiple of ``every`` (the
    first check included; 0: at none), ``{}`` at the others. ``records()`` is the index of the record being
    made (the history's length while the solver builds it), so a record's two calls with --averaging (w and
    the average) agree. The errors are not solver time (records' ``time_s``) but they are wall time: ~0.3 s
    per CoNLL-2000 record, about a third of a one-process run to its certified gap (docs/devices.md)."""
    if every == 1:
        return evaluate
    return lambda w: evaluate(w) if every and records() % every == 0 else {}


def evaluate_final_record(record: dict, evaluate, w, w_avg=None) -> None:
    """The last record's errors recomputed on the returned model ``w`` (and ``avg_*`` on ``w_avg``), in place:
    with --eval-every the checks that chose the model (best_point.py) may not have been evaluated."""
    record.update(evaluate(w))
    if w_avg is not None:
        record.update({f"avg_{k}": v for k, v in evaluate(w_avg).items()})


def write_certified(out: Path, solver, certified: dict, lam: float, dataset: str, task) -> str:
    """history.json (the records up to the last exact check) and model.pt (that check's model) of a
    torchrun run whose peer died, from rank 0's copy taken at the check; the clause that says so."""
    history = [dict(r) for r in solver.state.history[:certified["records"]]]
    evaluate_final_record(history[-1], task.evaluate, certified["w"])
    save_results(out, history, certified["w"], certified["ell"], lam, dataset, task.describe(), certified["extras"])
    if task.predictions is not None:
        save_predictions(out, task.predictions(certified["w"]))
    last = history[-1]
    gap = "n/a" if last["gap"] is None else f"{last['gap']:.3e}"
    return (f"wrote {out / 'history.json'} and {out / 'model.pt'} of the last certified point "
            f"({last['passes']:.1f} effective passes, exact duality gap {gap})")


def save_results(out: Path, history: list, w, ell: float, lam: float, dataset: str, layout: dict,
                 extras: dict | None = None) -> None:
    """history.json and model.pt into ``out``; if that fails (e.g. the disk filled up during the run),
    into a fresh temporary directory named in the error, so the trained model is not lost."""
    try:
        save_history(out, history)
        save_model(out, w, ell, lam, dataset, layout, extras)
    except OSError as e:
        rescue = Path(tempfile.mkdtemp(prefix="ssvm-train-results-"))
        save_history(rescue, history)
        save_model(rescue, w, ell, lam, dataset, layout, extras)
        raise SSVMInputError(f"out: writing the results into {out} failed ({e.strerror or e}); they are in {rescue} "
                             "(history.json, model.pt)") from None
