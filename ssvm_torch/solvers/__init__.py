"""Solvers: step rules, samplers, stopping and monitoring; they know nothing of any structure."""
from .box import BoxedDual
from .dual import BlockDual, Corner, GapPass
from .engine import Solver, SolverConfig
from .samplers import GapSampler, PermSampler, UniformSampler

__all__ = ["BoxedDual", "BlockDual", "Corner", "GapPass", "Solver", "SolverConfig", "GapSampler", "PermSampler",
           "UniformSampler"]
