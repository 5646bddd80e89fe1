"""Solvers: the loop, step rules, samplers, averaging and history; they know nothing of any structure."""
from .config import SOLVERS, STEPS, SolverConfig, SolverState
from .loop import Solver
from .make import make_solver
from .samplers import SAMPLERS, GapSampler, PermSampler, UniformSampler
from .steps import FWStep, SetStep, SSGStep, StepRule

__all__ = ["Solver", "make_solver", "SolverConfig", "SolverState", "SOLVERS", "STEPS", "SAMPLERS", "GapSampler", "PermSampler",
           "UniformSampler", "StepRule", "FWStep", "SetStep", "SSGStep"]
