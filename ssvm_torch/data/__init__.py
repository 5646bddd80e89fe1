"""Data: typed example containers and one loader module per shipped or generated dataset."""
from .examples import ExplicitData, FlatData, GraphData, GraphExample, PairData, PoseData
from .ocr import OCR_LETTERS, load_ocr, load_ocr_letters, load_scene
from .types import ChainData, csr_rows, data_dir

__all__ = ["ChainData", "ExplicitData", "FlatData", "GraphData", "GraphExample", "PairData", "PoseData", "OCR_LETTERS",
           "csr_rows", "data_dir", "load_ocr", "load_ocr_letters", "load_scene"]
