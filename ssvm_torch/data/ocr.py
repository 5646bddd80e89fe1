"""OCR handwritten words (Taskar et al. 2003) as chains, letters as multiclass examples, and the scene
multi-label data (Boutell et al. 2004): loaders of the copies shipped under ``datasets/``."""
from __future__ import annotations

import numpy as np
import torch

from ..errors import SSVMInputError
from .types import ChainData, load_npz

OCR_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def load_ocr(split: str = "small", dtype=torch.float64) -> tuple[ChainData, ChainData]:
    """OCR handwritten words (Taskar et al. 2003), 16x8 binary pixels per letter, 26 classes.

    Splits of the papers: ``small`` trains on fold 0 (626 words) and tests on folds 1-9 (6,251);
    ``large`` trains on folds 1-9 and tests on fold 0. Returns (train, test).
    """
    if split not in ("small", "large"):
        raise SSVMInputError(f"split: expected 'small' or 'large', got {split!r}")
    z = load_npz("ocr_letters.npz", ("pixels_packed", "labels", "word_offsets", "folds"))
    pixels = np.unpackbits(z["pixels_packed"], axis=1, count=128)
    labels, off, folds = z["labels"].astype(np.int64), z["word_offsets"].astype(np.int64), z["folds"]

    def build(words):
        rows = np.concatenate([np.arange(off[i], off[i + 1]) for i in words])
        lengths = off[words + 1] - off[words]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        return ChainData(torch.as_tensor(pixels[rows], dtype=dtype), torch.as_tensor(labels[rows]),
                         torch.as_tensor(offsets), 26, f"ocr-{split}")

    fold0 = np.flatnonzero(folds == 0)
    rest = np.flatnonzero(folds != 0)
    train, test = (fold0, rest) if split == "small" else (rest, fold0)
    return build(train), build(test)


def load_scene(dtype=torch.float64):
    """Scene multi-label data (Boutell et al. 2004): 294 features, 6 labels; 1,211 train / 1,196 test.
    Returns (X_train, Y_train, X_test, Y_test)."""
    z = load_npz("scene.npz", ("X_train", "y_train", "X_test", "y_test"))
    return (torch.as_tensor(z["X_train"], dtype=dtype), torch.as_tensor(z["y_train"].astype(np.int64)),
            torch.as_tensor(z["X_test"], dtype=dtype), torch.as_tensor(z["y_test"].astype(np.int64)))


def load_ocr_letters(split: str = "large", dtype=torch.float64):
    """OCR letters as independent characters (multiclass, 26 classes) with the words' split.
    Returns (X_train, y_train, X_test, y_test)."""
    train, test = load_ocr(split, dtype)
    return train.X, train.Y, test.X, test.Y
