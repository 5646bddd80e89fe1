"""Small networks trained upstream of the SSVM (no external data, no pretrained weights).

* :class:`LetterCNN` -- OCR letters (1 x 16 x 8): two conv blocks (3x3 convolutions, ReLU, 2x2 max
  pooling) and a fully connected layer give ``n_features`` penultimate features (the SSVM's
  features in the two-stage and alternating pipelines); a linear classifier on top gives the 26
  letter scores used to pretrain it (cross-entropy) and, alone, the "CNN alone" baseline.
* :class:`HeatmapFCN` -- pose-synth images (1 x 2G x 2G): a fully convolutional network whose J
  output maps (G x G, stride 2) are per-joint scores, the unaries of the tree model.
"""
from __future__ import annotations

import torch
from torch import nn


class LetterCNN(nn.Module):
    def __init__(self, width: int = 32, n_features: int = 128, n_classes: int = 26, dropout: float = 0.3):
        super().__init__()
        w = int(width)
        self.body = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1), nn.ReLU(), nn.Conv2d(w, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(dropout), nn.Linear(2 * w * 4 * 2, n_features), nn.ReLU())
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(n_features, n_classes))
        self.n_features = int(n_features)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate features (N, n_features) of letter images (N, 1, 16, 8)."""
        return self.body(images)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


class HeatmapFCN(nn.Module):
    def __init__(self, n_parts: int, width: int = 32):
        super().__init__()
        w = int(width)
        self.net = nn.Sequential(
            nn.Conv2d(1, w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, w, 3, padding=1), nn.ReLU(), nn.Conv2d(w, w, 3, padding=2, dilation=2), nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=4, dilation=4), nn.ReLU(), nn.Conv2d(w, w, 3, padding=8, dilation=8),
            nn.ReLU(), nn.Conv2d(w, n_parts, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Per-part score maps (B, J, G, G) of images (B, 2G, 2G) or (B, 1, 2G, 2G)."""
        return self.net(images if images.dim() == 4 else images[:, None])
