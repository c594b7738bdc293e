"""Token labeling for VOLO: per-image dense score maps, MixToken, and the token-label loss.

What sail-sg/volo trains with (through the token-labeling toolbox, zihangJiang/TokenLabeling):

- Label data: one file per training image, ``<token_label_data>/<class>/<image stem>.pt``, a
  half-precision tensor [2, 5, H, W]: the top-5 scores (NFNet-F6 logits) and their class ids at
  each location of the image.
- Targets: the map is cropped with the image (same flip, same random-resized-crop box) by RoIAlign
  over the dense [classes, H, W] scores, to ``token_label_size`` x ``token_label_size`` (one target
  per output token) and to 1 x 1 (the target of the class token), then softmaxed over classes and
  label-smoothed. The toolbox does this on the GPU for the whole batch; so does ``build_token_targets``.
  Two of the toolbox's choices are kept as published (``BOXES``, ``SMOOTHING``), each with the
  alternative a user may pick: it hands RoIAlign the crop as (top, left, bottom, right) where
  RoIAlign reads (x1, y1, x2, y2), so x and y are swapped, every coordinate scaled by the map's
  width; and it smooths a soft target p as p (1 - s + s/C) + s/C, the one-hot formula applied to
  a distribution (so it sums to 1 + s/C), where a convex mix would be p (1 - s) + s/C.
- MixToken: inside the model, after the patch embedding; lam ~ Beta(1, 1), a box on the token grid
  is swapped with the batch flipped, the dense output is swapped back (un-mixed), so each token's
  target stays its own image's; the class target is mixed with lam = 1 - box area / tokens.
- Loss: cls_weight * CE(class logits, class target) + dense_weight * CE(token logits, token targets),
  soft-target cross entropies; ``--ground-truth`` blends the image label into the class target.

The token grid is the image size / 16, so the label size must be too (``check_token_label_size``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

TOKEN_STRIDE = 16  # VOLO: patch embedding stride 8, then a 2x downsample before the transformer stage
TOP_K = 5
# The crop box handed to RoIAlign: the toolbox's (x and y swapped, as the published models trained),
# or the image's own (x along the width).
BOXES = ("toolbox", "corrected")
# Label smoothing of the soft token targets: the toolbox's p (1 - s + s/C) + s/C, or the convex mix.
SMOOTHING = ("toolbox", "convex")


def token_grid(img_size: int) -> int:
    return img_size // TOKEN_STRIDE


def check_token_label_size(img_size: int, token_label_size: int) -> None:
    """One-line error when the label maps cannot match the model's output tokens."""
    grid = token_grid(img_size)
    if token_label_size != grid:
        raise ValueError(
            f"token_label_size {token_label_size} does not match img_size {img_size}: VOLO's token grid is "
            f"img_size / {TOKEN_STRIDE} = {grid}, so the dense targets must be {grid}x{grid}"
        )


# ----------------------------------------------------------------------------------------------
# Label maps: read from the published layout, or synthesized with the same shape and dtype


class LabelMaps:
    """The [2, 5, H, W] top-5 score map of a training image, from disk or synthetic.

    ``root`` given: ``<root>/<key>.pt`` where key is ``<class>/<image stem>`` (the layout the
    token-labeling toolbox reads). Otherwise a deterministic synthetic map of ``size`` x ``size``
    whose top-1 class is mostly the image's label.
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        num_classes: int = 1000,
        size: int = 18,
        seed: int = 0,
    ) -> None:
        self.root = Path(root) if root else None
        if self.root is not None and not self.root.is_dir():
            raise ValueError(
                f"token_label_data {self.root} is not a directory (expected <dir>/<class>/<image>.pt)"
            )
        self.num_classes = num_classes
        self.size = size
        self.seed = seed

    def load(self, index: int, key: str, label: int) -> torch.Tensor:
        if self.root is None:
            return synthetic_label_map(index, label, self.num_classes, self.size, self.seed)
        path = self.root / f"{key}.pt"
        try:
            score_map = torch.load(path, map_location="cpu")
        except FileNotFoundError:
            raise FileNotFoundError(f"no token-label map for {key} at {path}") from None
        if score_map.dim() != 4 or score_map.shape[:2] != (2, TOP_K):
            raise ValueError(f"{path}: expected a [2, {TOP_K}, H, W] score map, got {list(score_map.shape)}")
        return score_map


def synthetic_label_map(index: int, label: int, num_classes: int, size: int, seed: int = 0) -> torch.Tensor:
    """A [2, 5, size, size] float16 map: descending top-5 logits and class ids, top-1 mostly ``label``."""
    rng = np.random.default_rng((seed, index))
    scores = np.sort(rng.normal(4.0, 2.0, size=(TOP_K, size, size)), axis=0)[::-1]
    # Five distinct ids per location (as a top-5 is): top1 + k * step, with k * step < num_classes.
    top1 = np.where(rng.random((size, size)) < 0.7, label, rng.integers(0, num_classes, size=(size, size)))
    step = rng.integers(1, max(2, num_classes // TOP_K), size=(size, size))
    ids = (top1 + np.arange(TOP_K).reshape(-1, 1, 1) * step) % num_classes
    return torch.from_numpy(np.stack([scores, ids.astype(np.float64)])).to(torch.float16)


# ----------------------------------------------------------------------------------------------
# Targets


@dataclass
class TokenTargets:
    """Soft targets of one batch: ``gt`` [B, C] (the image label), ``cls`` [B, C], ``dense`` [B, N, C]."""

    gt: torch.Tensor
    cls: torch.Tensor
    dense: torch.Tensor


def smooth_one_hot(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    off = smoothing / num_classes
    target = torch.full((labels.shape[0], num_classes), off, device=labels.device)
    return target.scatter_(1, labels.long().view(-1, 1), 1.0 - smoothing + off)


def dense_score_maps(label_maps: torch.Tensor, num_classes: int) -> torch.Tensor:
    """[B, 2, 5, H, W] top-5 (scores, ids) -> [B, C, H, W] scores, zero outside each location's top 5."""
    scores, ids = label_maps[:, 0].float(), label_maps[:, 1].long()
    dense = torch.zeros(label_maps.shape[0], num_classes, *label_maps.shape[-2:], device=label_maps.device)
    return dense.scatter_(1, ids, scores)


def roi_boxes(boxes: torch.Tensor, height: int, width: int, box: str = "toolbox") -> torch.Tensor:
    """RoIAlign's (x1, y1, x2, y2) in map pixels for crop boxes given as (x0, y0, x1, y1) fractions.

    ``toolbox``: as the token-labeling toolbox passes them (tlt/data/mixup.py, get_label): the crop
    as (top, left, bottom, right), all four scaled by the map's width, so RoIAlign's x runs down the
    image. ``corrected``: x along the width, y along the height. Both subtract 0.5 because RoIAlign
    (aligned=False) puts pixel centres at integers.
    """
    if box == "toolbox":
        return boxes[:, [1, 0, 3, 2]] * width - 0.5
    if box == "corrected":
        scale = torch.tensor([width, height, width, height], device=boxes.device, dtype=boxes.dtype)
        return boxes * scale - 0.5
    raise ValueError(f"--token_label_box {box}: choose one of {', '.join(BOXES)}")


def smooth_soft(
    target: torch.Tensor, smoothing: float, num_classes: int, form: str = "toolbox"
) -> torch.Tensor:
    """Label smoothing of a soft target: the toolbox's on/off form, or the convex mix."""
    off = smoothing / num_classes
    if form == "toolbox":
        return target * (1.0 - smoothing + off) + off
    if form == "convex":
        return target * (1.0 - smoothing) + off
    raise ValueError(f"--token_label_smoothing {form}: choose one of {', '.join(SMOOTHING)}")


def build_token_targets(
    label_maps: torch.Tensor,
    boxes: torch.Tensor,
    flipped: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    label_size: int,
    smoothing: float = 0.1,
    box: str = "toolbox",
    smoothing_form: str = "toolbox",
) -> TokenTargets:
    """Crop each image's score map like its image was cropped, and turn it into soft targets.

    ``boxes`` [B, 4] are (x0, y0, x1, y1) fractions of the (flipped) source image; the map is
    flipped the same way first. RoIAlign samples the dense scores inside the box onto the token
    grid (``label_size``^2 targets) and into one bin (the class token's target); ``box`` and
    ``smoothing_form`` choose the toolbox's published behaviour or the corrected one.
    """
    from torchvision.ops import roi_align

    dense = dense_score_maps(label_maps, num_classes)
    dense = torch.where(flipped.view(-1, 1, 1, 1).to(dense.device), dense.flip(-1), dense)
    height, width = dense.shape[-2:]
    rois = torch.cat(
        [
            torch.arange(len(dense), device=dense.device, dtype=torch.float32).view(-1, 1),
            roi_boxes(boxes.to(dense.device, torch.float32), height, width, box),
        ],
        dim=1,
    )
    tokens = roi_align(dense, rois, output_size=(label_size, label_size))  # [B, C, L, L]
    whole = roi_align(dense, rois, output_size=(1, 1)).flatten(1)  # [B, C]
    tokens = tokens.flatten(2).transpose(1, 2).softmax(-1)  # [B, L*L, C]
    whole = whole.softmax(-1)
    return TokenTargets(
        gt=smooth_one_hot(labels.to(dense.device), num_classes, smoothing),
        cls=smooth_soft(whole, smoothing, num_classes, smoothing_form),
        dense=smooth_soft(tokens, smoothing, num_classes, smoothing_form),
    )


def batch_maps(
    batch: dict[str, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A loader's batch as ``build_token_targets`` takes it first: its ``label_map``, ``crop_box``,
    ``flipped`` and ``labels`` (the keys every VOLO loader, DALI's too, hands the loop)."""
    return batch["label_map"], batch["crop_box"], batch["flipped"], batch["labels"]


# ----------------------------------------------------------------------------------------------
# MixToken


def sample_token_box(
    grid_h: int, grid_w: int, rng: np.random.Generator, beta: float = 1.0
) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) on the token grid: a CutMix box for lam ~ Beta(beta, beta).

    The box has sides sqrt(1 - lam) of the grid's, centered uniformly, clipped at the borders
    (so its area, not lam, is what the targets are mixed with).
    """
    lam = rng.beta(beta, beta)
    cut = np.sqrt(1.0 - lam)
    cut_h, cut_w = int(grid_h * cut), int(grid_w * cut)
    cy, cx = int(rng.integers(grid_h)), int(rng.integers(grid_w))
    top, bottom = int(np.clip(cy - cut_h // 2, 0, grid_h)), int(np.clip(cy + cut_h // 2, 0, grid_h))
    left, right = int(np.clip(cx - cut_w // 2, 0, grid_w)), int(np.clip(cx + cut_w // 2, 0, grid_w))
    return top, left, bottom, right


def box_area(box: tuple[int, int, int, int]) -> int:
    top, left, bottom, right = box
    return max(0, bottom - top) * max(0, right - left)


def mixtoken_lambda(box: tuple[int, int, int, int], num_tokens: int) -> float:
    """The share of tokens that still come from the image itself."""
    return 1.0 - box_area(box) / num_tokens


def swap_with_flipped(x: torch.Tensor, box: tuple[int, int, int, int], scale: int = 1) -> torch.Tensor:
    """x [B, H, W, C] with the box (in units of ``scale`` cells) taken from the batch flipped."""
    top, left, bottom, right = (v * scale for v in box)
    mask = torch.zeros(1, x.shape[1], x.shape[2], 1, dtype=torch.bool, device=x.device)
    mask[:, top:bottom, left:right] = True
    return torch.where(mask, x.flip(0), x)


class MixTokenForward(nn.Module):
    """A timm VOLO's training forward with MixToken: returns (class logits, token logits, box).

    Written here rather than calling timm's ``VOLO.forward_train``: in timm 1.0.15 that returns the
    class token's features without the classifier head (sail-sg/volo applies the head). Wrapping
    the model in a module also keeps DDP's gradient hooks on the path (DDP only sees ``forward``).
    """

    def __init__(
        self, model: nn.Module, mix_token: bool = True, beta: float = 1.0, seed: int | None = None
    ) -> None:
        super().__init__()
        if getattr(model, "post_network", None) is None:
            raise ValueError(
                "token labeling needs a VOLO with a class token (post_layers such as ('ca', 'ca'))"
            )
        self.model = model
        self.mix_token = mix_token
        self.beta = beta
        self.rng = np.random.default_rng(seed)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int, int, int]]:
        model = self.model
        x = model.patch_embed(images).permute(0, 2, 3, 1)  # [B, H/8, W/8, C]
        scale = model.pooling_scale
        grid_h, grid_w = x.shape[1] // scale, x.shape[2] // scale
        box = (0, 0, 0, 0)
        if self.mix_token and self.training:
            box = sample_token_box(grid_h, grid_w, self.rng, self.beta)
            # The box is on the token grid; the features here are `scale` times finer.
            x = swap_with_flipped(x, box, scale=scale)
        x = model.forward_tokens(x)  # [B, N, C]
        x = model.norm(model.forward_cls(x))  # class token first
        cls_logits = model.head(x[:, 0])
        dense = model.aux_head(x[:, 1:])
        if box_area(box):
            # Un-mix: swap the box back, so token (i, j) is scored against its own image's map.
            dense = swap_with_flipped(dense.view(len(dense), grid_h, grid_w, -1), box)
            dense = dense.reshape(len(dense), grid_h * grid_w, -1)
        return cls_logits, dense, box


# ----------------------------------------------------------------------------------------------
# Loss


def soft_target_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -sum(target * log_softmax(logits)); computed in float32 under AMP."""
    return torch.sum(-target * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()


class TokenLabelLoss(nn.Module):
    """cls_weight * CE(class) + dense_weight * CE(tokens), with MixToken's class-target mixing.

    ``ground_truth`` (``--ground-truth``, used when finetuning): the class target blends the image
    label in: half and half where the token label's top class agrees with the label, 10% label
    where it does not.
    """

    def __init__(
        self, dense_weight: float = 0.5, cls_weight: float = 1.0, ground_truth: bool = False
    ) -> None:
        super().__init__()
        if dense_weight + cls_weight <= 0:
            raise ValueError("dense_weight + cls_weight must be > 0")
        self.dense_weight = dense_weight
        self.cls_weight = cls_weight
        self.ground_truth = ground_truth

    def forward(
        self,
        cls_logits: torch.Tensor,
        dense_logits: torch.Tensor,
        box: tuple[int, int, int, int],
        targets: TokenTargets,
    ) -> torch.Tensor:
        if dense_logits.shape != targets.dense.shape:
            raise ValueError(
                f"token outputs {list(dense_logits.shape)} and token targets {list(targets.dense.shape)} differ: "
                "the token-label size must be the image size / 16"
            )
        cls_target = targets.cls
        if self.ground_truth:
            agree = (targets.gt.argmax(-1) == cls_target.argmax(-1)).float().unsqueeze(-1)
            ratio = 0.9 - 0.4 * agree
            cls_target = ratio * cls_target + (1.0 - ratio) * targets.gt
        lam = mixtoken_lambda(box, dense_logits.shape[1])
        if lam < 1.0:
            cls_target = lam * cls_target + (1.0 - lam) * cls_target.flip(0)
        num_classes = dense_logits.shape[-1]
        loss_cls = soft_target_cross_entropy(cls_logits, cls_target)
        loss_dense = soft_target_cross_entropy(
            dense_logits.reshape(-1, num_classes), targets.dense.reshape(-1, num_classes)
        )
        return self.cls_weight * loss_cls + self.dense_weight * loss_dense
