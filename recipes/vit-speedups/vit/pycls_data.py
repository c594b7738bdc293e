"""The ViT ladder's training images, two ways: pycls's data path (published) and the kit's uint8 one.

pycls (``pycls/datasets/imagenet.py``, ``transforms.py``; 2022) decodes each JPEG with OpenCV, turns
the whole image into float32 RGB in [0, 1], cuts an Inception-style random-sized crop and resizes it
bilinearly (OpenCV, float32), flips, runs AutoAugment on a uint8 copy of the crop and back to float32,
adds AlexNet-style PCA lighting noise, normalizes, and hands the network a float32 CHW array in BGR
channel order; the training loop copies that float32 batch to the GPU with a blocking ``.cuda()``.
Its random draws use numpy's global generator, in that order. ``PyclsTrainTransform`` does these
steps, so a published rung pays the CPU time and the 4-bytes-a-pixel copy pycls paid.

Beyond the publication, ``UINT8_PATH``: decode with Pillow, crop, flip and augment on uint8, copy a
uint8 batch (a quarter of the bytes) without blocking and normalize on the device (imagenet.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from PIL import Image

from reprokit_trainers.common.data import imagenet

PYCLS_PATH = "pycls"  # summary.json's software.data_path of each path
UINT8_PATH = "uint8-loader"
PIPELINES = {"pycls": PYCLS_PATH, "uint8": UINT8_PATH}

# pycls's ImageNet statistics: RGB mean/std, and the PCA of the pixels its lighting noise follows.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
EIG_VALS = np.array([[0.2175, 0.0188, 0.0045]])
EIG_VECS = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])
PCA_STD = 0.1  # pycls TRAIN.PCA_STD (its default; the ViT configs keep it)
FILL = (128, 128, 128)  # pycls's AutoAugment fills uncovered areas with mid-grey


def auto_augment(img_size: int, augment: str) -> Any:
    """pycls's AutoAugment as timm's ``v0`` policy (pycls/datasets/augment.py says the two match),
    with pycls's bilinear warps, grey fill and Posterize kept at 1 bit or more; None for ``none``."""
    if augment.lower() in ("", "none"):
        return None
    if augment != "AutoAugment":
        raise ValueError(f"--augment {augment}: the kit supports AutoAugment or none")
    from timm.data.auto_augment import auto_augment_transform

    hparams = {"translate_const": int(img_size * 0.45), "img_mean": FILL, "interpolation": Image.BILINEAR}
    policy = auto_augment_transform("v0", hparams)
    # pycls keeps at least 1 bit in Posterize (its POSTERIZE_MIN = 1) where timm's v0 keeps
    # int(m / 10 * 4), 0 at m = 2, which Pillow refuses: lift those ops to 1 bit, as pycls.
    for op in (op for sub_policy in policy.policy for op in sub_policy):
        if op.name == "Posterize" and int(op.magnitude / 10 * 4) < 1:
            op.magnitude = 2.5
    return policy


def decode_bgr(data: bytes) -> np.ndarray:
    """JPEG (or PNG) bytes -> HxWx3 uint8 BGR, OpenCV's decoder as pycls's ``cv2.imread``."""
    import cv2

    if not data:
        raise ValueError("an empty file (0 bytes)")
    try:
        image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as error:  # an assertion of OpenCV's own, e.g. on a buffer it cannot take
        raise ValueError(f"OpenCV could not decode an image: {str(error).strip().splitlines()[-1]}") from None
    if image is None:
        raise ValueError("OpenCV could not decode an image (not a JPEG or PNG?)")
    return image


def _scale_and_center_crop(image: np.ndarray, scale: int, crop: int) -> np.ndarray:
    """Short side to ``scale`` (bilinear, truncating the long side), then the centre ``crop``."""
    import cv2

    h, w = image.shape[:2]
    if w < h and w != scale:
        w, h = scale, int(h / w * scale)
        image = cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)
    elif h <= w and h != scale:
        w, h = int(w / h * scale), scale
        image = cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)
    x, y = math.ceil((w - crop) / 2), math.ceil((h - crop) / 2)
    return image[y : y + crop, x : x + crop, :]


def random_sized_crop(image: np.ndarray, size: int, area_frac: float = 0.08, tries: int = 10) -> np.ndarray:
    """pycls's Inception crop: up to ``tries`` draws of an area and an aspect ratio (each side
    rounded, the two swapped half the time) until one fits; else the centre crop."""
    import cv2

    h, w = image.shape[:2]
    for _ in range(tries):
        area = np.random.uniform(area_frac, 1.0) * h * w
        aspect = np.random.uniform(3.0 / 4.0, 4.0 / 3.0)
        cw, ch = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if np.random.uniform() < 0.5:
            cw, ch = ch, cw
        if ch <= h and cw <= w:
            y = 0 if ch == h else np.random.randint(0, h - ch)
            x = 0 if cw == w else np.random.randint(0, w - cw)
            return cv2.resize(image[y : y + ch, x : x + cw, :], (size, size), interpolation=cv2.INTER_LINEAR)
    return _scale_and_center_crop(image, size, size)


class PyclsTrainTransform:
    """OpenCV BGR uint8 -> float32 CHW (BGR) as pycls's ImageNet training path makes it."""

    def __init__(self, img_size: int, augment: str = "AutoAugment", pca_std: float = PCA_STD) -> None:
        self.img_size, self.pca_std = img_size, pca_std
        self.augment = auto_augment(img_size, augment)
        self.mean = np.array(MEAN, dtype=np.float32)
        self.std = np.array(STD, dtype=np.float32)

    def __call__(self, bgr: np.ndarray) -> torch.Tensor:
        image = bgr[:, :, ::-1].astype(np.float32) / 255  # the whole image, RGB float32
        image = random_sized_crop(image, self.img_size)
        if np.random.uniform() < 0.5:
            image = image[:, ::-1, :]
        if self.augment is not None:  # AutoAugment works on PIL images: to uint8 and back
            augmented = self.augment(Image.fromarray((image * 255).astype(np.uint8)))
            image = np.asarray(augmented).astype(np.float32) / 255
        image = self._lighting(image)
        for channel in range(3):  # pycls's color_norm: channel by channel, into the image itself
            image[:, :, channel] = (image[:, :, channel] - self.mean[channel]) / self.std[channel]
        return torch.from_numpy(np.ascontiguousarray(image[:, :, ::-1].transpose(2, 0, 1)))

    def _lighting(self, image: np.ndarray) -> np.ndarray:
        """AlexNet's PCA colour noise: one offset per channel, drawn per image."""
        alpha = np.random.normal(0, self.pca_std, size=(1, 3))
        offset = np.sum(EIG_VECS * np.repeat(alpha, 3, axis=0) * np.repeat(EIG_VALS, 3, axis=0), axis=1)
        for channel in range(3):
            image[:, :, channel] = image[:, :, channel] + offset[channel]
        return image


class PyclsTrainDataset(torch.utils.data.Dataset):
    """Decodes with OpenCV and runs pycls's transform in the loader workers: float32 samples."""

    data_path = PYCLS_PATH

    def __init__(self, source: Any, transform: PyclsTrainTransform) -> None:
        self.source, self.transform = source, transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        try:
            image = decode_bgr(self.source.read(index))
        except (OSError, ValueError) as error:  # unreadable, or OpenCV decodes nothing of it
            raise imagenet.bad_image(self.source, index, error) from None
        return {"pixel_values": self.transform(image), "labels": self.source.label(index)}


class Uint8TrainTransform:
    """Pillow RGB -> uint8 CHW crop (random-sized crop, flip, AutoAugment); normalized on the device."""

    def __init__(
        self,
        img_size: int,
        augment: str = "AutoAugment",
        hflip: float = 0.5,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.img_size, self.hflip, self.scale, self.ratio = img_size, hflip, scale, ratio
        self.augment = auto_augment(img_size, augment)

    def __call__(self, image: Image.Image) -> tuple[torch.Tensor, imagenet.Crop]:
        import random

        width, height = image.size
        top, left, h, w = imagenet.random_resized_crop_params(width, height, self.scale, self.ratio)
        size = (self.img_size, self.img_size)
        crop = image.resize(size, Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
        flipped = random.random() < self.hflip
        if flipped:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if self.augment is not None:
            crop = self.augment(crop)
        tensor = torch.from_numpy(np.asarray(crop, dtype=np.uint8).copy()).permute(2, 0, 1)
        box = (left / width, top / height, (left + w) / width, (top + h) / height)
        return tensor, imagenet.Crop(box=box, flipped=flipped)


class Uint8TrainDataset(imagenet.ImageTrainDataset):
    data_path = UINT8_PATH


def train_dataset(pipeline: str, source: Any, img_size: int, augment: str) -> torch.utils.data.Dataset:
    """The dataset of ``--input_pipeline``: pycls's float32 path, or the kit's uint8 one."""
    if pipeline == "pycls":
        return PyclsTrainDataset(source, PyclsTrainTransform(img_size, augment))
    if pipeline == "uint8":
        return Uint8TrainDataset(source, Uint8TrainTransform(img_size, augment))
    raise ValueError(f"--input_pipeline {pipeline}: choose one of {', '.join(PIPELINES)}")
