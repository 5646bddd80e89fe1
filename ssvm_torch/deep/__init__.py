"""CNN + SSVM pipelines: letter and heat-map networks, OCR words as images, the warm-started dual after
a feature change, and the LightningModule of the OCR pipelines (``python -m ssvm_torch.deep fit``)."""
from .data import Words, load_ocr_words, pad_rows
from .nets import HeatmapFCN, LetterCNN
from .warm import warm_start, with_features

__all__ = ["HeatmapFCN", "LetterCNN", "Words", "load_ocr_words", "pad_rows", "warm_start", "with_features"]
