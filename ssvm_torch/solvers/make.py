"""One constructor for every solver: the FW family and SSG run in :class:`~.loop.Solver`; EG, the dual
extragradient and the 1-slack cutting plane are clients of the same store seam
(:class:`~.outer.OuterSolver`) with the same history records, checkpoints and stopping rules."""
from __future__ import annotations

from .config import SolverConfig
from .cutting_plane import CuttingPlaneSolver
from .deg import DEGSolver
from .eg import EGSolver
from .loop import Solver

OUTER = {"eg": EGSolver, "deg": DEGSolver, "cutting-plane": CuttingPlaneSolver}


def make_solver(dual, config: SolverConfig, evaluate=None, progress=None, monitor_start: bool = True, interrupt=None,
                sets=None):
    """The solver ``config.solver`` names, on ``dual``; ``sets``: the working sets a warm start of the FW family
    continues from (:func:`~ssvm_torch.solvers.active_set.warm_sets`)."""
    cls = OUTER.get(config.validate().solver, Solver)
    extra = {"sets": sets} if sets is not None else {}
    return cls(dual, config, evaluate=evaluate, progress=progress, monitor_start=monitor_start, interrupt=interrupt,
               **extra)
