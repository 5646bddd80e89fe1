"""ssvm_torch: structured SVMs in PyTorch with the Frank-Wolfe family of dual solvers."""
from .datasets import ChainData, load_dataset, load_ocr
from .errors import SSVMInputError
from .models import ChainModel, ExplicitModel
from .solvers import Solver, SolverConfig

__version__ = "0.1.0"
__all__ = ["ChainData", "ChainModel", "ExplicitModel", "Solver", "SolverConfig", "SSVMInputError",
           "load_dataset", "load_ocr"]
