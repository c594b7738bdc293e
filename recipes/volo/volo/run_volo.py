"""Train a VOLO (timm) on ImageNet with token labeling, as sail-sg/volo does, and measure img/s.

The published recipe (sail-sg/volo main.py with the token-labeling toolbox; recipes/volo/SOURCES.md §1, §2):
AdamW, cosine schedule stepped per epoch with a linear warmup from ``--warmup_lr`` and ten cooldown
epochs at ``--min_lr``, stochastic depth, mixed precision (apex O1 there, torch.amp here), label
smoothing 0.1, RandAugment ``rand-m9-mstd0.5-inc1`` + random erasing 0.25, no MixUp/CutMix, and
token labeling: dense top-5 score maps cropped with each image (RoIAlign), MixToken in the model,
loss = 1.0 x class CE + 0.5 x token CE. Finetuning at a higher resolution loads the 224 checkpoint
with its position embedding interpolated to the new token grid (``--finetune``). By default it runs
the publication's kernels (sail-sg/volo's three-op attention, the per-tensor AdamW of torch <= 1.10,
one gradient all-reduce after backward as Apex's DDP) and records those that ran in summary.json's
``software``; ``--attention sdpa``, ``--optimizer_impl foreach|fused`` and ``--ddp_schedule overlap``
go beyond the publication (README.md, *Published software*).

    python -m reprokit_trainers.volo --output_dir out --model_name_or_path volo_d1_224 --img_size 224 \\
        --per_device_train_batch_size 128 --lr 1.6e-3 --drop_path 0.1 --amp fp16 --token_label_size 14
    torchrun --nproc_per_node 8 -m reprokit_trainers.volo ...      # DDP (NCCL on GPUs, gloo on CPUs)

Results go to the run directory through rundir.py: throughput.csv, tensorboard/, sysinfo.json and,
last, summary.json; the trained weights to ``<output_dir>/checkpoint/model.pt``.

Why an explicit loop rather than transformers' Trainer: the recipe steps timm's per-epoch cosine
schedule (warmup and cooldown in epochs), the model's training forward returns (class logits, token
logits, MixToken box) that the loss consumes together, and batches are finished on the device
(normalize, random erasing, RoIAlign of the label maps) between the loader and the model. Each of
these would be an override of Trainer internals; the loop below is shorter than those overrides.
Logging goes through the trainers' common step logger (``common/measure/steps.py``).
"""

from __future__ import annotations

import json
import random
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from reprokit_trainers.common.data import imagenet, prefetch, randaugment
from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.measure.steps import StepLogger
from reprokit_trainers.common.process import lifecycle, streams
from reprokit_trainers.common.process.args import (
    DeviceArguments,
    arg,
    is_size,
    one_line_errors,
    parse_command_line,
)
from reprokit_trainers.common.process.distributed import (
    accelerator_device,
    init_process_group,
    is_main_process,
    log,
    reduce_mean,
)
from reprokit_trainers.common.record import software
from reprokit_trainers.common.record.rundir import RunDir

from . import record, tokenlabel

# VOLO D1-D5 as timm registers them (timm/models/volo.py; the same at every resolution). Kept here
# because timm's entry points fix these values, so tiny overrides for smoke runs could not reach them.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "volo_d1": {"layers": (4, 4, 8, 2), "embed_dims": (192, 384, 384, 384), "num_heads": (6, 12, 12, 12)},
    "volo_d2": {"layers": (6, 4, 10, 4), "embed_dims": (256, 512, 512, 512), "num_heads": (8, 16, 16, 16)},
    "volo_d3": {"layers": (8, 8, 16, 4), "embed_dims": (256, 512, 512, 512), "num_heads": (8, 16, 16, 16)},
    "volo_d4": {"layers": (8, 8, 16, 4), "embed_dims": (384, 768, 768, 768), "num_heads": (12, 16, 16, 16)},
    "volo_d5": {
        "layers": (12, 12, 20, 4),
        "embed_dims": (384, 768, 768, 768),
        "num_heads": (12, 16, 16, 16),
        "mlp_ratio": 4,
        "stem_hidden_dim": 128,
    },
}
PROG = "run_volo.py"  # the name errors and sysinfo.json give
LOADERS = ("torch", "gpu_decode", "dali")
# AdamW's kernels (torch's flags for each), and the gradient all-reduce schedules: the first of each
# is the publication's (timm 0.4 on torch <= 1.10; Apex DDP(delay_allreduce=True)).
OPTIMIZER_IMPLS = {"per_tensor": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
DDP_SCHEDULES = ("after_backward", "overlap")


@dataclass
class ModelArguments:
    model_name_or_path: str = arg(
        "volo_d1_224",
        "timm VOLO name: volo_d1..volo_d5, optionally with a resolution (volo_d5_224, volo_d5_512)",
    )
    img_size: int | None = arg(None, "published --img-size; default: the name's resolution")
    model_kwargs_json: str | None = arg(
        None, 'architecture overrides, e.g. \'{"layers":[1,1,1,1],"embed_dims":[32,64,64,64]}\''
    )
    model_config_json: str | None = arg(
        None, "the kit's name for the same overrides (recipe model.architecture)"
    )
    num_classes: int = arg(1000)
    drop_path: float = arg(0.0, "published --drop-path: stochastic depth rate")
    finetune: str | None = arg(
        None, "published --finetune: a checkpoint file, or a run directory holding checkpoint/model.pt"
    )
    attention: str = arg(
        "math",
        "the transformer blocks' attention: math (q@k^T, softmax, @v, as sail-sg/volo) or sdpa "
        "(fused, beyond the publication)",
    )


@dataclass
class DataArguments(imagenet.ImageNetArguments):
    synthetic_label_map_size: int = arg(18, "H = W of synthetic token-label maps")
    token_label: bool = arg(True, "published --token-label (always on: the recipe's loss)")
    token_label_data: str | None = arg(
        None, "published --token-label-data: <dir>/<class>/<image>.pt maps; else synthetic"
    )
    token_label_size: int | None = arg(
        None, "published --token-label-size; must be img_size / 16 (default: that)"
    )
    token_label_box: str = arg(
        "toolbox",
        "the crop box RoIAlign cuts the label maps with: toolbox (x and y swapped, as published) "
        "or corrected",
    )
    token_label_smoothing: str = arg(
        "toolbox", "smoothing of soft targets: toolbox, p(1-s+s/C)+s/C as published, or convex, p(1-s)+s/C"
    )
    loader: str = arg("torch", "torch (CPU workers), gpu_decode (nvJPEG, augmented on the GPU), dali")
    dataloader_num_workers: int = arg(8, "published -j (main.py default 8)")
    pin_memory: bool = arg(False, "published --pin-mem")
    auto_augment: str = arg(
        "rand-m9-mstd0.5-inc1", "published --aa: a timm RandAugment policy (rand-...), or none"
    )
    reprob: float = arg(0.25, "random erasing probability (CutOut)")
    remode: str = arg("pixel")
    recount: int = arg(1)
    hflip: float = arg(0.5)
    scale: list[float] = field(default_factory=lambda: [0.08, 1.0])
    ratio: list[float] = field(default_factory=lambda: [3 / 4, 4 / 3])
    train_interpolation: str = arg(
        "random", "random (bilinear or bicubic per image), bilinear or bicubic: resize and RandAugment"
    )

    def policy(self) -> str | None:
        """The RandAugment policy in effect: None for none."""
        return None if self.auto_augment.lower() in ("", "none") else self.auto_augment


@dataclass
class TrainArguments:
    output_dir: str = field(metadata={"help": "the run directory"})
    per_device_train_batch_size: int = arg(128, "published -b (per GPU)")
    lr: float = arg(
        1.6e-3, "published --lr, used as is: sail-sg/volo main.py does not rescale it with the batch"
    )
    lr_base: float | None = arg(None, "if set, lr = lr_base x global batch / 1024 (overrides --lr)")
    weight_decay: float = arg(0.05)
    opt_eps: float = arg(1e-8)
    epochs: int = arg(300)
    warmup_epochs: int = arg(20)
    cooldown_epochs: int = arg(10, "epochs at min_lr after the cosine (timm: 10)")
    warmup_lr: float = arg(1e-6)
    min_lr: float = arg(1e-5)
    smoothing: float = arg(0.1)
    dense_weight: float = arg(0.5)
    cls_weight: float = arg(1.0)
    ground_truth: bool = arg(False, "published --ground-truth (finetuning)")
    mix_token: bool = arg(True, "MixToken (on in sail-sg/volo's models)")
    amp: str | None = arg(None, "bf16 | fp16 | no (default: fp16 with --apex_amp, else no)")
    apex_amp: bool = arg(False, "published --apex-amp: mapped to torch.amp fp16 + GradScaler")
    optimizer_impl: str = arg(
        "per_tensor",
        "AdamW's kernels: per_tensor (a loop over the tensors, as timm 0.4 on torch <= 1.10), "
        "foreach or fused (beyond the publication)",
    )
    ddp_schedule: str = arg(
        "after_backward",
        "gradient all-reduce: after_backward (one bucket once backward is done, as Apex "
        "DDP(delay_allreduce=True)) or overlap (torch DDP's buckets during backward, beyond the publication)",
    )
    host_sync: str = arg(
        "every_step",
        "every_step: the host waits for the device after each step, as main.py does (torch.cuda."
        "synchronize; the loss read each step in one process, all-reduced and read at logging steps in "
        "several); logging_steps: only at the meter's logging steps (beyond the publication)",
    )
    zero_grad: str = arg(
        "zeros",
        "zeros: optimizer.zero_grad() fills the gradients with zeros (set_to_none=False, the "
        "default of torch 1.7-1.11 that main.py ran); set_to_none: frees them (beyond the publication)",
    )
    prefetch: str = arg(
        "side_stream",
        "side_stream: the next batch copied, normalized and erased on a CUDA stream of its own "
        "during the step, as the toolbox's prefetcher; inline: on the compute stream when taken "
        "(beyond the publication)",
    )
    clip_grad: float | None = arg(None)
    max_steps: int = arg(-1, "stop after this many steps (smoke runs, benchmarks)")
    logging_steps: int = arg(50, "main.py --log-interval")
    throughput_warmup_steps: int = arg(5)
    seed: int = arg(42)
    save_checkpoint: bool = arg(True)


# Every argument the trainer takes (arguments.json is their schema: ranges and choices).
ARGUMENTS = (ModelArguments, DataArguments, TrainArguments, DeviceArguments)


def parse_args(
    argv: list[str] | None = None,
) -> tuple[ModelArguments, DataArguments, TrainArguments, DeviceArguments]:
    return parse_command_line(PROG, ARGUMENTS, argv, trainer_dir=Path(__file__).parent)


# ----------------------------------------------------------------------------------------------
# Model


def parse_model_name(name: str) -> tuple[str, int | None]:
    match = re.fullmatch(r"(volo_d[1-5])(?:_(\d+))?", name)
    if not match:
        raise ValueError(
            f"unknown model {name!r}: use volo_d1..volo_d5, optionally with a resolution (volo_d5_224)"
        )
    return match.group(1), int(match.group(2)) if match.group(2) else None


def check_architecture(architecture: dict[str, Any]) -> None:
    """Four stages of blocks, widths and heads, each a whole number of at least 1, each stage's width split
    evenly over its heads: a model of no blocks trained "ok", a width of 0 raised ZeroDivisionError in the
    model's init, and a width its heads do not divide failed at the first forward's reshape."""
    for key in ("layers", "embed_dims", "num_heads"):
        value = architecture.get(key)
        stages = value if isinstance(value, (list, tuple)) else ()
        if len(stages) != 4 or not all(is_size(v) for v in stages):
            raise ValueError(
                f"the architecture's {key} {value!r}: give four whole numbers of at least 1, one a stage"
            )
    for stage, (width, heads) in enumerate(
        zip(architecture["embed_dims"], architecture["num_heads"], strict=True)
    ):
        if width % heads:
            raise ValueError(
                f"the architecture's stage {stage + 1} is {width} wide with {heads} heads: a width its heads "
                "divide evenly (embed_dims, num_heads)"
            )


def build_model(args: ModelArguments, img_size: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """timm's VOLO with the transformer blocks' attention kernel as ``--attention`` says."""
    from timm.models.volo import VOLO

    from .attention import use_attention

    family, _ = parse_model_name(args.model_name_or_path)
    architecture = dict(ARCHITECTURES[family])
    for text in (args.model_config_json, args.model_kwargs_json):
        if text:
            architecture.update(json.loads(text))
    check_architecture(architecture)
    model = VOLO(
        img_size=img_size, num_classes=args.num_classes, drop_path_rate=args.drop_path, **architecture
    )
    use_attention(model, args.attention)
    return model, architecture


def flops_per_sample(args: ModelArguments, img_size: int) -> float:
    """FLOPs of one training sample (forward and backward) of the VOLO these arguments build at
    ``img_size``: the class head and the token-label (aux) head both trained."""

    def step(model: torch.nn.Module, batch: int) -> torch.Tensor:
        outputs = model(torch.zeros(batch, 3, img_size, img_size))
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return sum(o.float().sum() for o in outputs if isinstance(o, torch.Tensor))

    return flops.count_training_flops(lambda: build_model(args, img_size)[0], step)


def resolve_checkpoint(path: str) -> Path:
    """A checkpoint file, or a run directory: its checkpoint/model.pt (this trainer) or newest *.pth.tar."""
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    if candidate.is_dir():
        for name in ("checkpoint/model.pt", "model.pt", "model_best.pth.tar"):
            if (candidate / name).is_file():
                return candidate / name
        found = sorted(candidate.glob("*.pth*"), key=lambda p: p.stat().st_mtime)
        if found:
            return found[-1]
    raise FileNotFoundError(
        f"--finetune {path}: no checkpoint there (expected a file or <dir>/checkpoint/model.pt)"
    )


def pretraining(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """What a checkpoint this trainer saved says of its training (None for another's, e.g. the
    released sail-sg/volo weights): steps, whether the schedule ran to its end, on what data."""
    if "steps" not in checkpoint:
        return None
    return {
        "steps": checkpoint["steps"],
        "schedule_completed": bool(checkpoint.get("schedule_completed", False)),
        "data": checkpoint.get("data"),
    }


def load_finetune(model: torch.nn.Module, path: str) -> dict[str, Any]:
    """Load pretrained weights, resizing the [1, H, W, C] position embedding to the model's grid."""
    from timm.layers import resample_abs_pos_embed_nhwc

    file = resolve_checkpoint(path)
    # Checkpoints from sail-sg/volo pickle their argparse namespace too, so weights_only cannot be used;
    # these are files of the user's own runs.
    checkpoint = torch.load(file, map_location="cpu", weights_only=False)
    state = checkpoint.get("state_dict", checkpoint.get("model", checkpoint))
    state = {k.removeprefix("module."): v for k, v in state.items()}
    own = model.state_dict()
    dropped = [
        k
        for k in ("head.weight", "head.bias", "aux_head.weight", "aux_head.bias")
        if k in state and state[k].shape != own[k].shape
    ]
    for key in dropped:  # another number of classes: the classifiers start fresh (as sail-sg/volo does)
        del state[key]
    info: dict[str, Any] = {
        "finetune_from": str(file),
        "pos_embed_resized": None,
        "heads_reset": dropped,
        "pretraining": pretraining(checkpoint),
    }
    old = state.get("pos_embed")
    if old is not None and old.shape != model.pos_embed.shape:
        new_size = list(model.pos_embed.shape[1:3])
        # Bicubic, as sail-sg/volo's resize_pos_embed_4d (antialiasing only matters when shrinking).
        state["pos_embed"] = resample_abs_pos_embed_nhwc(
            old, new_size, interpolation="bicubic", antialias=False
        )
        info["pos_embed_resized"] = [list(old.shape[1:3]), new_size]
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1].strip()
        raise ValueError(f"--finetune {file}: does not fit {type(model).__name__}: {first}") from None
    missing = [k for k in missing if k not in dropped]
    if missing or unexpected:
        raise ValueError(
            f"--finetune {file}: not a checkpoint of this architecture (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return info


# ----------------------------------------------------------------------------------------------
# Data


def build_data(
    data_args: DataArguments, img_size: int, label_size: int, batch_size: int, seed: int
) -> tuple[torch.utils.data.DataLoader, dict[str, Any]]:
    source, described = data_args.image_source()
    maps = tokenlabel.LabelMaps(
        data_args.token_label_data,
        source.num_classes,
        data_args.synthetic_label_map_size,
        data_args.synthetic_seed,
    )
    described["token_label_data"] = data_args.token_label_data or "synthetic"

    def label_map(index: int, crop: imagenet.Crop) -> dict[str, torch.Tensor]:
        # The map travels whole; it is cropped with the image on the device, batched (RoIAlign).
        return {"label_map": maps.load(index, source.key(index), source.label(index))}

    transform = imagenet.TrainTransform(
        img_size,
        auto_augment=data_args.policy(),
        hflip=data_args.hflip,
        scale=data_args.scale,
        ratio=data_args.ratio,
        interpolation=data_args.train_interpolation,
    )
    dataset = imagenet.ImageTrainDataset(
        source, transform, encoded=data_args.loader in ("gpu_decode", "dali"), extra=label_map
    )
    if data_args.loader == "dali":
        from . import dali

        loader, dali_info = dali.train_loader(
            dataset,
            batch_size,
            img_size=img_size,
            auto_augment=data_args.auto_augment or None,
            interpolation=data_args.train_interpolation,
            num_workers=data_args.dataloader_num_workers,
            seed=seed,
        )
        return loader, {**described, **dali_info}
    loader = imagenet.train_loader(
        dataset, batch_size, data_args.dataloader_num_workers, data_args.pin_memory, seed
    )
    return loader, described


def check_augmentation(data_args: DataArguments) -> None:
    """A RandAugment policy both loaders run alike (timm's rand- grammar, its default op sets)."""
    if data_args.policy():
        randaugment.parse_policy(data_args.policy())


def check_loader(loader: str) -> None:
    """One-line errors for the faster loaders where they cannot run."""
    if loader not in LOADERS:
        raise ValueError(f"--loader {loader}: choose one of {', '.join(LOADERS)}")
    if loader == "gpu_decode" and not torch.cuda.is_available():
        raise ValueError(
            "--loader gpu_decode decodes JPEGs on a CUDA GPU (torchvision.io.decode_jpeg); none is visible here"
        )
    if loader == "dali":
        try:
            from . import dali  # noqa: F401
        except ImportError as error:
            raise ValueError(
                f"--loader dali needs NVIDIA DALI: pip install nvidia-dali-cuda120 (the kit's cuda image has it); {error}"
            ) from None


# ----------------------------------------------------------------------------------------------
# Training


def check_kernels(model_args: ModelArguments, data_args: DataArguments, train_args: TrainArguments) -> None:
    """One-line errors for kernel and token-label choices the trainer does not have."""
    from .attention import ATTENTION

    for flag, value, known in (
        ("--attention", model_args.attention, ATTENTION),
        ("--optimizer_impl", train_args.optimizer_impl, tuple(OPTIMIZER_IMPLS)),
        ("--ddp_schedule", train_args.ddp_schedule, DDP_SCHEDULES),
        ("--prefetch", train_args.prefetch, prefetch.MODES),
        ("--token_label_box", data_args.token_label_box, tokenlabel.BOXES),
        ("--token_label_smoothing", data_args.token_label_smoothing, tokenlabel.SMOOTHING),
    ):
        if value not in known:
            raise ValueError(f"{flag} {value}: choose one of {', '.join(known)}")


def build_optimizer(model: torch.nn.Module, train_args: TrainArguments, lr: float) -> torch.optim.Optimizer:
    """timm's AdamW factory, as main.py: no weight decay on biases, norms, pos_embed and cls_token;
    its kernels as ``--optimizer_impl`` says (timm 0.4 on torch <= 1.10 stepped tensor by tensor)."""
    from timm.optim import create_optimizer_v2

    return create_optimizer_v2(
        model,
        opt="adamw",
        lr=lr,
        weight_decay=train_args.weight_decay,
        eps=train_args.opt_eps,
        **OPTIMIZER_IMPLS[train_args.optimizer_impl],
    )


def build_scheduler(optimizer: torch.optim.Optimizer, train_args: TrainArguments) -> tuple[Any, int]:
    """main.py's schedule and its length in epochs: stepped once per epoch (t_in_epochs), warmup
    epochs from warmup_lr, cosine to min_lr over ``epochs``, then ``cooldown_epochs`` at min_lr
    (timm's create_scheduler adds them)."""
    from timm.scheduler import CosineLRScheduler

    scheduler = CosineLRScheduler(
        optimizer,
        t_initial=train_args.epochs,
        lr_min=train_args.min_lr,
        warmup_t=train_args.warmup_epochs,
        warmup_lr_init=train_args.warmup_lr,
        cycle_limit=1,
        t_in_epochs=True,
    )
    return scheduler, train_args.epochs + train_args.cooldown_epochs


def data_parallel(forward: torch.nn.Module, schedule: str, device: torch.device) -> torch.nn.Module:
    """torch DDP with the gradient all-reduce ``schedule``. after_backward is Apex's
    ``DDP(delay_allreduce=True)`` (not installable on today's bases) emulated: one bucket large
    enough for every gradient, so DDP reduces it once, when the last gradient of backward is ready,
    with nothing left to overlap. overlap is torch DDP's default buckets (25 MiB, reduced while
    backward goes on)."""
    if not dist.is_initialized():
        return forward
    cap = software.one_bucket_mb(forward) if schedule == "after_backward" else None
    return torch.nn.parallel.DistributedDataParallel(
        forward, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=cap
    )


def amp_settings(train_args: TrainArguments) -> tuple[str, torch.dtype | None]:
    mode = train_args.amp or ("fp16" if train_args.apex_amp else "no")
    if mode not in ("bf16", "fp16", "no"):
        raise ValueError(f"--amp {mode}: choose bf16, fp16 or no")
    return mode, {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)


@dataclass
class Setup:
    """Everything main() resolved before training: what the loop and the summary need."""

    model: torch.nn.Module
    architecture: dict[str, Any]
    img_size: int
    label_size: int
    amp_mode: str
    amp_dtype: torch.dtype | None
    loader: torch.utils.data.DataLoader
    data_info: dict[str, Any]
    finetuned: dict[str, Any]
    gpu_decode: imagenet.GpuDecode | None  # --loader gpu_decode: decodes and augments on the device


def setup(
    model_args: ModelArguments,
    data_args: DataArguments,
    train_args: TrainArguments,
    rank: int,
    device: torch.device,
) -> Setup:
    """Check the configuration and build model and data; configuration problems raise ValueError."""
    _, named_size = parse_model_name(model_args.model_name_or_path)
    img_size = model_args.img_size or named_size or 224
    label_size = data_args.token_label_size or tokenlabel.token_grid(img_size)
    tokenlabel.check_token_label_size(img_size, label_size)
    if not data_args.token_label:
        raise ValueError("run_volo.py trains with token labeling only, as every published VOLO command does")
    check_augmentation(data_args)
    check_loader(data_args.loader)
    check_kernels(model_args, data_args, train_args)
    amp_mode, amp_dtype = amp_settings(train_args)
    random.seed(train_args.seed + rank)
    np.random.seed(train_args.seed + rank)
    torch.manual_seed(train_args.seed + rank)
    model, architecture = build_model(model_args, img_size)
    finetuned = load_finetune(model, model_args.finetune) if model_args.finetune else {}
    loader, data_info = build_data(
        data_args, img_size, label_size, train_args.per_device_train_batch_size, train_args.seed
    )
    if data_info["num_classes_data"] > model_args.num_classes:
        raise ValueError(
            f"the data has {data_info['num_classes_data']} classes, the model {model_args.num_classes}"
        )
    gpu_decode = None
    if data_args.loader == "gpu_decode":
        gpu_decode = imagenet.GpuDecode(
            img_size,
            device,
            data_args.policy(),
            data_args.train_interpolation,
            seed=train_args.seed + rank,
        )
    return Setup(
        model,
        architecture,
        img_size,
        label_size,
        amp_mode,
        amp_dtype,
        loader,
        data_info,
        finetuned,
        gpu_decode,
    )


@dataclass
class Trained:
    """What the loop did: steps, epochs scheduled, and the software it ran, read back at the end."""

    steps: int
    epochs: int
    software: dict[str, str]
    ddp_buckets: int | None


def train_loop(
    run: Setup,
    data_args: DataArguments,
    train_args: TrainArguments,
    lr: float,
    device: torch.device,
    rank: int,
    logger: StepLogger,
) -> Trained:
    """Train until max_steps or the end of the schedule: sail-sg/volo's train_one_epoch, step by step
    (main.py at cf35775: the prefetcher's batch, the token targets, forward and loss, the loss read
    when training alone, zero_grad, backward and step, a device synchronize, at logging steps the
    loss all-reduced and read), with the waits and zeroing ``--host_sync`` and ``--zero_grad`` ask."""
    model = run.model.to(device)
    forward = data_parallel(
        tokenlabel.MixTokenForward(model, train_args.mix_token, seed=train_args.seed + rank),
        train_args.ddp_schedule,
        device,
    )
    every_step = train_args.host_sync == "every_step"
    logger.watch(forward, every_step=every_step)
    forward.train()
    optimizer = build_optimizer(model, train_args, lr)
    scheduler, total_epochs = build_scheduler(optimizer, train_args)
    scaler = torch.amp.GradScaler(device.type, enabled=run.amp_mode == "fp16")
    autocast = (
        torch.autocast(device.type, dtype=run.amp_dtype) if run.amp_dtype is not None else nullcontext()
    )
    loss_fn = tokenlabel.TokenLabelLoss(
        train_args.dense_weight, train_args.cls_weight, train_args.ground_truth
    )
    normalize = imagenet.DeviceNormalize(
        device, re_prob=data_args.reprob, re_mode=data_args.remode, re_count=data_args.recount
    )
    gpu_decode = run.gpu_decode
    num_classes = run.model.num_classes
    # main.py's args.distributed: WORLD_SIZE > 1. Alone it reads the loss every step (losses_m), in a
    # group only at logging steps, after reducing it (reduce_tensor).
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    set_to_none = train_args.zero_grad == "set_to_none"

    def ready(batch: dict[str, Any]) -> dict[str, Any]:
        """The toolbox's prefetch work: the batch to the device, the images normalized and erased."""
        if gpu_decode is not None:  # decoded and augmented on the device (its own stream) already
            images = gpu_decode(batch["jpeg"], batch["crop_box"], batch["flipped"], batch["source"])
            batch = {k: v for k, v in batch.items() if k != "jpeg"}
            return {**prefetch.to_device(batch, device), "pixel_values": normalize(images)}
        moved = prefetch.to_device(batch, device)
        moved["pixel_values"] = normalize(moved["pixel_values"])
        return moved

    # main.py's loader (Pillow in workers) goes through the toolbox's prefetcher; the GPU decoder and
    # DALI, beyond it or the post's own, hand over batches made ready as the loop takes them.
    own_loader = gpu_decode is not None or "dali_device" in run.data_info
    prefetcher = (
        None
        if own_loader
        else prefetch.Prefetcher(run.loader, device, ready, train_args.prefetch, hand_over=not every_step)
    )
    zeroed: str | None = None
    steps_per_epoch = len(run.loader)
    step, epoch = 0, 0
    done = False
    while not done and epoch < total_epochs:
        imagenet.set_epoch(run.loader, epoch)
        for index, batch in enumerate(logger.batches(prefetcher if prefetcher is not None else run.loader)):
            if prefetcher is None:
                batch = ready(batch)
            targets = tokenlabel.build_token_targets(
                *tokenlabel.batch_maps(batch),
                num_classes,
                run.label_size,
                train_args.smoothing,
                box=data_args.token_label_box,
                smoothing_form=data_args.token_label_smoothing,
            )
            with autocast:
                cls_logits, dense_logits, box = forward(batch["pixel_values"])
            loss = loss_fn(cls_logits, dense_logits, box, targets)
            loss_value: torch.Tensor | float = loss
            if every_step and not distributed:
                loss_value = loss.item()  # main.py: losses_m.update(loss.item(), ...)
            optimizer.zero_grad(set_to_none=set_to_none)
            if zeroed is None and step > 0:
                zeroed = software.zero_grad_left(model.parameters())
            scaler.scale(loss).backward()
            if train_args.clip_grad is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), train_args.clip_grad)
            scaler.step(optimizer)
            scaler.update()
            if every_step:
                streams.synchronize(device)  # main.py: torch.cuda.synchronize() after every step
            step += 1
            done = 0 < train_args.max_steps <= step
            last = done or (epoch == total_epochs - 1 and index == steps_per_epoch - 1)
            if every_step and distributed and logger.logs(step, last):
                loss_value = reduce_mean(loss)  # main.py: reduce_tensor(loss.data), then .item()
            lr = optimizer.param_groups[0]["lr"]
            logger.step(step, epoch + (index + 1) / steps_per_epoch, lr, loss_value, last=last)
            if done:
                break
        epoch += 1
        scheduler.step(epoch)
    ran = record.software_in_effect(run, model, forward, optimizer, device, every_step, zeroed, prefetcher)
    return Trained(step, total_epochs, ran, software.ddp_buckets(forward))


def planned_steps(train_args: TrainArguments, steps_per_epoch: int) -> int:
    """The steps this run will train: the whole schedule (cooldown included), or max_steps if fewer."""
    schedule = steps_per_epoch * (train_args.epochs + train_args.cooldown_epochs)
    return min(schedule, train_args.max_steps) if train_args.max_steps > 0 else schedule


def save_checkpoint(run: Setup, model_args: ModelArguments, train_args: TrainArguments, steps: int) -> Path:
    """<output_dir>/checkpoint/model.pt, timm-style ({"state_dict": ...}): what --finetune reads. It
    says how it was trained, so a finetune from it knows whether it had pretrained weights."""
    path = Path(train_args.output_dir) / "checkpoint" / "model.pt"
    if is_main_process():
        path.parent.mkdir(parents=True, exist_ok=True)
        schedule = len(run.loader) * (train_args.epochs + train_args.cooldown_epochs)
        payload = {
            "state_dict": run.model.state_dict(),
            "model_name": model_args.model_name_or_path,
            "img_size": run.img_size,
            "architecture": run.architecture,
            "num_classes": model_args.num_classes,
            "steps": steps,
            "schedule_completed": steps >= schedule,
            "data": run.data_info["data"],
        }
        torch.save(payload, path)
    if dist.is_initialized():
        dist.barrier()
    return path


def sum_over_ranks(count: int, device: torch.device) -> int:
    """A per-rank count summed over the process group (every rank must call it)."""
    if not dist.is_initialized():
        return count
    total = torch.tensor([count], device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(total)
    return int(total.item())


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    # 1. Parse arguments; set TF32 before anything asks cuBLAS whether it may use it
    lifecycle.quiet_notices()
    model_args, data_args, train_args, device_args = parse_args(argv)
    tf32 = lifecycle.set_tf32(PROG, device_args.tf32)
    lifecycle.require_accelerator(PROG)

    # 2. Join the process group: torchrun's, or alone a 1-rank group, so that DDP wraps the model and
    # runs its all-reduce schedule as on 8 devices
    device = accelerator_device()
    rank, world = init_process_group(device, single_process_group=True)

    # 3. Check the configuration, build the model and the data (problems: one line, nothing started)
    with one_line_errors(PROG, ValueError, FileNotFoundError, json.JSONDecodeError):
        run = setup(model_args, data_args, train_args, rank, device)

    # 4. Open the run directory
    run_dir = RunDir(train_args.output_dir, unit="img/s")
    run_dir.write_sysinfo(trainer=PROG, precision=tf32)
    record.departures(run_dir, run, data_args)
    per_device = train_args.per_device_train_batch_size
    global_batch = per_device * world
    # --lr is the published value and is used as is (main.py never rescales it); --lr_base applies
    # the paper's rule lr = lr_base x batch / 1024 instead. Both are reported.
    lr = train_args.lr_base * global_batch / 1024 if train_args.lr_base is not None else train_args.lr
    parameters = sum(p.numel() for p in run.model.parameters())
    log(
        f"{model_args.model_name_or_path} at {run.img_size}px ({parameters / 1e6:.2f}M parameters), token labels "
        f"{run.label_size}x{run.label_size}, batch {per_device} x {world} = {global_batch}, lr {lr:.3g} "
        f"(= lr_base {lr * 1024 / global_batch:.3g} x {global_batch}/1024), amp {run.amp_mode}, "
        f"tf32 {tf32['tf32_matmul']}, data {run.data_info['data']}, loader {data_args.loader}, attention "
        f"{model_args.attention}, AdamW {train_args.optimizer_impl}, all-reduce {train_args.ddp_schedule}"
    )
    if run.finetuned:
        log(
            f"finetuning from {run.finetuned['finetune_from']}, pos_embed {run.finetuned['pos_embed_resized']}"
        )

    # 5. Count the FLOPs of one training sample (rank 0, before the first timed step)
    sample_flops = flops.count_on_main_process(lambda: flops_per_sample(model_args, run.img_size))

    # 6. Train
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as main.py: fixed shapes, let cuDNN pick kernels
    logger = StepLogger(
        run_dir,
        train_args.throughput_warmup_steps,
        global_batch,
        train_args.logging_steps,
        total_steps=planned_steps(train_args, len(run.loader)),
        profile=device_args.profile,
    )
    with imagenet.bad_images_named(PROG):
        trained = train_loop(run, data_args, train_args, lr, device, rank, logger)
    logger.close()
    switches: dict[str, Any] = {
        "loader": data_args.loader,
        "torch_compile": False,
        "tf32": tf32["tf32_matmul"],
    }
    if run.gpu_decode is not None:
        # Images nvJPEG cannot decode (PNG, CMYK), decoded by Pillow instead, as the published loaders do.
        switches["gpu_decode_cpu_fallbacks"] = sum_over_ranks(run.gpu_decode.cpu_fallbacks, device)

    # 7. Save the weights (what --finetune reads)
    checkpoint = (
        save_checkpoint(run, model_args, train_args, trained.steps) if train_args.save_checkpoint else None
    )

    # 8. Write the summary, last
    return record.write_summary(
        logger,
        (model_args, data_args, train_args, device_args),
        run,
        trained,
        sample_flops,
        lr,
        global_batch,
        tf32,
        checkpoint,
        switches,
    )


if __name__ == "__main__":
    main()
