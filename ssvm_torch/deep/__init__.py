"""CNN + SSVM pipelines: letter and heat-map networks, OCR words as images, the warm-started dual after
a feature change, the LightningModule of the OCR pipelines, the neural CoNLL-2000 chunkers and the neural UD dependency parser
(``python -m ssvm_torch.deep fit --config <recipe>``, the recipe's class_path picks the module).

The names below are imported on first use (PEP 562): a submodule that needs no Lightning (``ud_parse``, which
``ssvm-parse`` runs, ``ud_decode``, the networks) imports without it."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_HOMES = {"DeepChainModule": "ocr_module", "ConllChunker": "conll_chunker", "UDParser": "ud_parser",
          "Words": "ocr_words", "load_ocr_words": "ocr_words", "pad_rows": "ocr_words",
          "HeatmapFCN": "ocr_pose_nets", "LetterCNN": "ocr_pose_nets", "warm_start": "warm", "with_features": "warm"}

__all__ = ["ConllChunker", "DeepChainModule", "HeatmapFCN", "LetterCNN", "Words", "load_ocr_words", "pad_rows", "UDParser",
           "warm_start", "with_features"]

if TYPE_CHECKING:                               # the static view (type checkers, the API reference)
    from .conll_chunker import ConllChunker
    from .ocr_module import DeepChainModule
    from .ocr_pose_nets import HeatmapFCN, LetterCNN
    from .ocr_words import Words, load_ocr_words, pad_rows
    from .ud_parser import UDParser
    from .warm import warm_start, with_features


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
