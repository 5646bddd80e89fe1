"""CNN + SSVM pipelines: letter and heat-map networks, OCR words as images, the warm-started dual after
a feature change, the LightningModule of the OCR pipelines, the neural CoNLL-2000 chunkers and the neural UD dependency parser
(``python -m ssvm_torch.deep fit --config <recipe>``, the recipe's class_path picks the module)."""
from .ocr_module import DeepChainModule
from .conll_chunker import ConllChunker
from .ud_parser import UDParser
from .ocr_words import Words, load_ocr_words, pad_rows
from .ocr_pose_nets import HeatmapFCN, LetterCNN
from .warm import warm_start, with_features

__all__ = ["ConllChunker", "DeepChainModule", "HeatmapFCN", "LetterCNN", "Words", "load_ocr_words", "pad_rows", "UDParser",
           "warm_start", "with_features"]
