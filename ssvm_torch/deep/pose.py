"""CNN heat maps + tree SSVM on pose-synth (the LSP recipe of Osokin et al. 2016, App. I.4: CNN
unaries as in Chen & Yuille 2014, the pictorial-structures SSVM on top).

Stage 1 (:func:`train_heatmaps`): a fully convolutional network (:class:`~ssvm_torch.deep.ocr_pose_nets.HeatmapFCN`)
is trained on the training figures alone with a per-joint softmax cross-entropy over the G x G cells
(target: the joint's cell), replacing the template detector of :mod:`ssvm_torch.data.pose_synth`.
Stage 2 (:func:`heatmap_pose_data`): its per-joint log-softmax maps become the unary score maps S_j of
:class:`~ssvm_torch.models.pose.TreePoseModel`; the engine (BCFW + gap sampling, the quadratic
deformation weights kept >= 0 by box constraints) trains the unary and deformation weights.
"""
from __future__ import annotations

import torch
import torch.nn.functional as Fn

from ..data.examples import PoseData
from ..errors import check
from .ocr_pose_nets import HeatmapFCN


def heatmap_loss(maps: torch.Tensor, joints: torch.Tensor) -> torch.Tensor:
    """Mean over figures and joints of -log softmax(maps_j)[cell of joint j]."""
    B, J, H, W = maps.shape
    target = joints[..., 0] * W + joints[..., 1]
    return Fn.cross_entropy(maps.reshape(B * J, H * W), target.reshape(-1))


def train_heatmaps(images: torch.Tensor, joints: torch.Tensor, epochs: int = 60, width: int = 32,
                   lr: float = 2e-3, batch: int = 16, seed: int = 0, log=None) -> HeatmapFCN:
    """Stage 1: the heat-map network on (images (n, 2G, 2G), joints (n, J, 2)) by Adam."""
    check(images.dim() == 3 and joints.dim() == 3 and images.shape[0] == joints.shape[0], "images",
          "(n, 2G, 2G) images with (n, J, 2) joints", (tuple(images.shape), tuple(joints.shape)))
    torch.manual_seed(seed)
    net = HeatmapFCN(joints.shape[1], width)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    gen = torch.Generator().manual_seed(seed)
    x = images.to(torch.float32)
    for epoch in range(epochs):
        total = 0.0
        for b in torch.randperm(x.shape[0], generator=gen).split(batch):
            loss = heatmap_loss(net(x[b]), joints[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * len(b)
        sched.step()
        if log is not None:
            log(epoch, total / x.shape[0])
    return net.eval()


@torch.no_grad()
def heatmap_maps(net: HeatmapFCN, images: torch.Tensor) -> torch.Tensor:
    """Per-joint log-softmax maps (n, J, G, G) float64: the unaries of the tree model."""
    out = torch.cat([net(images[s:s + 64].to(torch.float32)) for s in range(0, images.shape[0], 64)])
    n, J, H, W = out.shape
    return Fn.log_softmax(out.reshape(n, J, H * W), -1).reshape(n, J, H, W).to(torch.float64)


def heatmap_pose_data(net: HeatmapFCN, images: torch.Tensor, joints: torch.Tensor) -> PoseData:
    """Stage 2's data: the network's maps as the part score maps."""
    return PoseData(heatmap_maps(net, images), joints)
