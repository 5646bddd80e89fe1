"""ssvm_torch: structured SVMs in PyTorch with the Frank-Wolfe family of dual solvers."""
from .devices import start_numba_threads

start_numba_threads()            # before any kernel: numba's pool must not reset torch's thread count (devices.py)
from .data import ChainData, ExplicitData, FlatData, GraphData, PairData, PoseData, load_ocr
from .errors import SSVMInputError
from .models import ChainModel, ExplicitModel, StructuredModel
from .solvers import Solver, SolverConfig
from .stores import make_store
from .tasks import TASKS, load_dataset, load_task
from .version import __version__ as __version__

_ESTIMATORS = ("ChainSSVM", "MulticlassSSVM", "MultiLabelSSVM", "StructuredSVM")


def __getattr__(name):
    # the estimators import scikit-learn (optional, and slow to import): load them on first use
    if name in _ESTIMATORS:
        from . import estimator
        return getattr(estimator, name)
    if name == "SegmentSSVM":
        from .segment_estimator import SegmentSSVM
        return SegmentSSVM
    if name in ("GraphSSVM", "TypedGraphSSVM"):
        from . import graph_estimator
        return getattr(graph_estimator, name)
    if name in ("LatentChainSSVM", "LatentSegmentSSVM", "LatentGraphSSVM"):
        from . import latent_estimator
        return getattr(latent_estimator, name)
    if name == "StructuredPerceptron":
        from .perceptron_estimator import StructuredPerceptron
        return StructuredPerceptron
    if name == "LatentNodeSSVM":
        from .latent_node_estimator import LatentNodeSSVM
        return LatentNodeSSVM
    raise AttributeError(f"module 'ssvm_torch' has no attribute {name!r}")


__all__ = ["ChainData", "ChainModel", "ChainSSVM", "ExplicitData", "ExplicitModel", "FlatData", "GraphData", "GraphSSVM",
           "LatentChainSSVM", "LatentGraphSSVM", "LatentNodeSSVM", "LatentSegmentSSVM", "MulticlassSSVM", "MultiLabelSSVM", "PairData", "PoseData", "SegmentSSVM", "Solver", "SolverConfig", "SSVMInputError", "TypedGraphSSVM",
           "StructuredModel", "StructuredPerceptron", "StructuredSVM", "TASKS", "load_dataset", "load_ocr", "load_task", "make_store"]
