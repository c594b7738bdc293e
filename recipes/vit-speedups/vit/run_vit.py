"""Train pycls's ViT on ImageNet with each rung of Meta's speedup ladder, and measure img/s.

The publication (Meta AI 2022, recipes/vit-speedups/SOURCES.md §1) stacked optimizations on a DDP fp32 baseline of
facebookresearch/pycls's ViT; each is a switch here, so the ladder is one ablation:

    --amp no|fp16|bf16|pure_fp16      fp16 = autocast + GradScaler (fp32 master weights);
                                      pure_fp16 = the whole model and optimizer in fp16 (the 2.18x)
    --optimizer_impl loop|foreach|fused   per-tensor loop, multi-tensor (torch._foreach_*, pycls's
                                      OPTIM.MTA), or fused kernels
    --classifier token|pooled         class token, or the mean of the tokens (no class token)
    --layout batch_first|batch_second (N, L, E) or (L, N, E) into nn.MultiheadAttention
    --sharding ddp|fsdp               FSDP with fp16 parameters and LayerNorms kept in fp32, as pycls
                                      did with fairscale (LAYER_NORM_FP32)
    --attention math|mha|sdpa         math: bmm, softmax, bmm, as torch 1.x's nn.MultiheadAttention ran
                                      in 2022 (published); beyond it: mha (torch 2's module, fused
                                      SDPA inside) and sdpa (SDPA called directly)
    --input_pipeline pycls|uint8      pycls's data path (published) or the kit's uint8 one (pycls_data.py)
    --compile                         beyond the publication: torch.compile

pycls's ViT recipe (its configs/fsdp/*.yaml, the ViT configs the repository ships): AdamW,
base lr 1e-3 with 5 warmup epochs from 0.1x and a cosine to 0.005x over 100 epochs (set per epoch),
weight decay 0.24 except on biases and LayerNorms, label smoothing 0.1, AutoAugment on a random-sized
crop with a flip, PCA lighting noise. Not modeled (device-side, small next to a ViT step):
MixUp/CutMix, the EMA copy of the weights.

summary.json's ``software`` says what ran, read back (common/record/software.py): the attention kernels
dispatched, the optimizer's implementation, the gradient reduction, TF32, the mixed precision and the
data path; the host holds a published rung to its publication's.

    python -m reprokit_trainers.vit --output_dir out --model_size b16 --per_device_train_batch_size 70 --amp fp16
    torchrun --nproc_per_node 8 -m reprokit_trainers.vit ...     # NCCL on GPUs, gloo on CPUs

A process started without torchrun still joins a 1-rank process group, so DDP and FSDP wrap the
model exactly as on 8 devices. Results go to the run directory through rundir.py: throughput.csv,
tensorboard/, sysinfo.json and, last, summary.json.

Why an explicit loop rather than transformers' Trainer: the ladder's rungs are the loop's own
mechanics (how the model is wrapped, FSDP's mixed-precision policy with fp32 LayerNorms, a model cast
to fp16 without master weights, which optimizer kernel steps), and Trainer owns exactly those; each
rung would be an override of its internals. The loop is short and pycls's own is the same shape.
"""

from __future__ import annotations

import json
import math
import random
import re
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from reprokit_trainers.common.data import imagenet
from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.measure.steps import StepLogger
from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.process.args import DeviceArguments, arg, one_line_errors, parse_command_line
from reprokit_trainers.common.process.distributed import accelerator_device, init_process_group, log
from reprokit_trainers.common.record import software
from reprokit_trainers.common.record.rundir import RunDir

from . import pycls_data, record
from .model import ViT, vit_config

PROG = "run_vit.py"  # the name errors and sysinfo.json give
AMP_MODES = ("no", "fp16", "bf16", "pure_fp16")
OPTIMIZER_IMPLS = ("loop", "foreach", "fused")
OPTIMIZERS = ("adamw", "sgd")
SHARDINGS = ("ddp", "fsdp")


@dataclass
class ModelArguments:
    model_name_or_path: str = arg("pycls-vit-b16", "pycls-vit-<size>; the size is taken from the name")
    model_revision: str | None = arg(None, "recorded only (no hub checkpoint)")
    model_size: str | None = arg(None, "tiny | b16 | l16 (default: from model_name_or_path)")
    model_config_json: str | None = arg(
        None, 'architecture overrides, e.g. \'{"n_layers": 2, "hidden_d": 64}\''
    )
    classifier: str = arg("token", "token | pooled (pycls VIT.CLASSIFIER_TYPE)")
    layout: str = arg("batch_first", "batch_first | batch_second")
    attention: str = arg(
        "math",
        "math (bmm, softmax, bmm: pycls's 2022 nn.MultiheadAttention) | mha (torch 2's "
        "nn.MultiheadAttention: fused SDPA) | sdpa (F.scaled_dot_product_attention called directly)",
    )
    img_size: int = arg(224, "training image size (pycls TRAIN.IM_SIZE)")
    num_classes: int = arg(1000)


@dataclass
class DataArguments(imagenet.ImageNetArguments):
    dataloader_num_workers: int = arg(10, "per process (pycls DATA_LOADER.NUM_WORKERS)")
    pin_memory: bool = arg(True, "pycls DATA_LOADER.PIN_MEMORY")
    augment: str = arg("AutoAugment", "AutoAugment | none (pycls TRAIN.AUGMENT)")
    input_pipeline: str = arg(
        "pycls",
        "pycls (OpenCV decode, float32 augment, lighting and normalize on the CPU, blocking "
        "copy: published) | uint8 (Pillow, uint8 batch, normalized on the device, non-blocking copy)",
    )


@dataclass
class TrainArguments:
    output_dir: str = field(metadata={"help": "the run directory"})
    per_device_train_batch_size: int = arg(70, "images per device per step")
    amp: str = arg("no", "no | fp16 | bf16 | pure_fp16")
    optimizer: str = arg("adamw", "adamw (pycls's ViT configs) | sgd")
    optimizer_impl: str = arg("loop", "loop | foreach | fused")
    learning_rate: float = arg(1e-3, "pycls OPTIM.BASE_LR")
    weight_decay: float = arg(0.24, "0 on biases and LayerNorms, as pycls's configs")
    adam_beta1: float = arg(0.9)
    adam_beta2: float = arg(0.999)
    adam_epsilon: float = arg(1e-8)
    momentum: float = arg(0.9, "sgd only")
    nesterov: bool = arg(True, "sgd only")
    epochs: int = arg(100, "pycls OPTIM.MAX_EPOCH (the schedule's length)")
    warmup_epochs: int = arg(5)
    warmup_factor: float = arg(0.1)
    min_lr: float = arg(0.005, "pycls OPTIM.MIN_LR: a fraction of the base lr")
    label_smoothing: float = arg(0.1)
    sharding: str = arg("ddp", "ddp | fsdp")
    fsdp_reshard_after_forward: bool = arg(
        False, "pycls FSDP.RESHARD_AFTER_FW (False in its configs: SHARD_GRAD_OP; True: FULL_SHARD)"
    )
    fsdp_layer_norm_fp32: bool = arg(True, "keep LayerNorms in fp32 under FSDP mixed precision (pycls)")
    compile: bool = arg(False, "torch.compile the wrapped model")
    host_sync: str = arg(
        "every_step",
        "every_step: as pycls's train_epoch, each step checks the labels (labels.max() < classes), "
        "computes the top-1/top-5 errors and reads them and the loss, all-reduced over the ranks; "
        "logging_steps: the loss read only at logging steps (beyond the publication)",
    )
    zero_grad: str = arg(
        "zeros",
        "zeros: optimizer.zero_grad() fills the gradients with zeros (set_to_none=False, torch "
        "1.9-1.11's default that pycls ran); set_to_none: frees them (beyond the publication)",
    )
    max_steps: int = arg(-1, "stop after this many steps (benchmarks, smoke runs)")
    logging_steps: int = arg(100, "pycls LOG_PERIOD")
    throughput_warmup_steps: int = arg(10)
    seed: int = arg(1, "pycls RNG_SEED")


# Every argument the trainer takes (arguments.json is their schema: ranges and choices).
ARGUMENTS = (ModelArguments, DataArguments, TrainArguments, DeviceArguments)


def parse_args(
    argv: list[str] | None = None,
) -> tuple[ModelArguments, DataArguments, TrainArguments, DeviceArguments]:
    return parse_command_line(PROG, ARGUMENTS, argv, trainer_dir=Path(__file__).parent)


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"--{name} {value}: choose one of {', '.join(allowed)}")


# ----------------------------------------------------------------------------------------------
# Model


def model_size(args: ModelArguments) -> str:
    if args.model_size:
        return args.model_size
    match = re.search(r"(tiny|b16|l16)$", args.model_name_or_path)
    if not match:
        raise ValueError(
            f"--model_name_or_path {args.model_name_or_path}: name a size (pycls-vit-b16) or give --model_size"
        )
    return match.group(1)


def build_model(args: ModelArguments) -> ViT:
    overrides = json.loads(args.model_config_json) if args.model_config_json else {}
    overrides = {**overrides, "image_size": args.img_size, "num_classes": args.num_classes}
    config = vit_config(
        model_size(args), overrides, classifier=args.classifier, layout=args.layout, attention=args.attention
    )
    return ViT(config)


def flops_per_sample(args: ModelArguments) -> float:
    """FLOPs of one training sample (forward and backward) of the ViT these arguments build.

    The classifier and layout switches change the count slightly (one token more or less); the
    precision does not.
    """

    def step(model: nn.Module, batch: int) -> torch.Tensor:
        return model(torch.zeros(batch, 3, args.img_size, args.img_size)).sum()

    return flops.count_training_flops(lambda: build_model(args), step)


# ----------------------------------------------------------------------------------------------
# Data


def build_loader(
    args: DataArguments, img_size: int, batch_size: int, seed: int
) -> tuple[torch.utils.data.DataLoader, dict[str, Any]]:
    source, described = args.image_source()
    dataset = pycls_data.train_dataset(args.input_pipeline, source, img_size, args.augment)
    loader = imagenet.train_loader(
        dataset,
        batch_size,
        args.dataloader_num_workers,
        pin_memory=args.pin_memory and torch.cuda.is_available(),
        seed=seed,
    )
    return loader, described


def data_path(loader: torch.utils.data.DataLoader, pixels: torch.Tensor) -> str:
    """The data path a batch came by: its dataset's, checked against the batch it delivered (pycls's
    path hands over normalized float32, the kit's uint8)."""
    path = loader.dataset.data_path
    expected = torch.float32 if path == pycls_data.PYCLS_PATH else torch.uint8
    if pixels.dtype != expected:
        raise RuntimeError(f"the {path} data path delivered {pixels.dtype} batches, not {expected}")
    return path


def attention_in_effect(model: ViT, prec: Precision, device: torch.device) -> str:
    """The attention kernels the first block's attention dispatches to, forward and backward, for
    this run's token count, width, dtype and autocast (read before the model is wrapped)."""
    block = model.encoder.block_0.self_attention
    config = model.config
    shape = (
        (2, config.seq_len, config.hidden_d) if model.batch_first else (config.seq_len, 2, config.hidden_d)
    )
    tokens = torch.ones(shape, device=device, dtype=prec.model_dtype, requires_grad=True)

    def step() -> None:
        with prec.autocast(device):
            out = block(tokens)
        out.float().sum().backward()

    kernel = software.attention_kernel(step)
    model.zero_grad(set_to_none=True)
    return kernel


# ----------------------------------------------------------------------------------------------
# The ladder's mechanics: wrapping, precision, optimizer


@dataclass(frozen=True)
class Precision:
    mode: str
    autocast_dtype: torch.dtype | None  # fp16 / bf16: autocast over fp32 master weights
    model_dtype: torch.dtype  # pure_fp16: the parameters themselves are fp16
    loss_scaling: bool  # dynamic loss scaling (GradScaler) for fp16 autocast

    def autocast(self, device: torch.device) -> AbstractContextManager:
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype)


def precision(mode: str) -> Precision:
    check_choice("amp", mode, AMP_MODES)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(mode)
    # pure_fp16 has no master weights and, as apex's O3, no loss scaling: GradScaler cannot unscale
    # fp16 gradients anyway. This is the rung the publication says sometimes loses accuracy.
    model_dtype = torch.float16 if mode == "pure_fp16" else torch.float32
    return Precision(mode, half, model_dtype, loss_scaling=mode == "fp16")


def wrap_model(model: nn.Module, args: TrainArguments, prec: Precision, device: torch.device) -> nn.Module:
    """DDP, or FSDP as pycls configured fairscale's: fp16 parameters, fp32 LayerNorms, one flat unit."""
    if args.sharding == "ddp":
        return nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    kwargs: dict[str, Any] = {}
    if prec.autocast_dtype is not None:
        dtype = prec.autocast_dtype
        if args.fsdp_layer_norm_fp32:
            # Each LayerNorm becomes its own FSDP unit with mixed precision off (its weights stay fp32);
            # everything else is one flat unit whose parameters are gathered and computed in fp16.
            kwargs["mixed_precision"] = MixedPrecision(
                param_dtype=dtype,
                reduce_dtype=dtype,
                buffer_dtype=dtype,
                _module_classes_to_ignore=(nn.LayerNorm,),
            )
            kwargs["auto_wrap_policy"] = ModuleWrapPolicy({nn.LayerNorm})
        else:
            kwargs["mixed_precision"] = MixedPrecision(
                param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype
            )
    strategy = (
        ShardingStrategy.FULL_SHARD if args.fsdp_reshard_after_forward else ShardingStrategy.SHARD_GRAD_OP
    )
    # use_orig_params: per-parameter weight decay groups and torch.compile need the original parameters.
    return FullyShardedDataParallel(
        model, sharding_strategy=strategy, device_id=device, use_orig_params=True, **kwargs
    )


NO_DECAY = re.compile(r"(^|\.)ln(_\d+)?\.|bias$")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """pycls's groups: no weight decay on LayerNorm parameters and biases (its ViT configs set 0)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if NO_DECAY.search(name) else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, args: TrainArguments, prec: Precision) -> torch.optim.Optimizer:
    """AdamW (pycls's ViT configs) or SGD, stepped per tensor, multi-tensor or fused."""
    check_choice("optimizer", args.optimizer, OPTIMIZERS)
    check_choice("optimizer_impl", args.optimizer_impl, OPTIMIZER_IMPLS)
    impl = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[
        args.optimizer_impl
    ]
    groups = param_groups(model, args.weight_decay)
    try:
        if args.optimizer == "sgd":
            return torch.optim.SGD(
                groups, lr=args.learning_rate, momentum=args.momentum, nesterov=args.nesterov, **impl
            )
        eps = args.adam_epsilon
        if prec.model_dtype == torch.float16 and args.optimizer_impl != "fused":
            # The per-tensor and multi-tensor kernels do Adam's arithmetic in the parameters' dtype,
            # where 1e-8 rounds to 0 and a zero gradient gives 0/0, and the second moment underflows
            # (training diverges); fused kernels do the arithmetic in fp32. Avoid the NaNs, and say so.
            eps = max(eps, 1e-7)
            log(
                f"--amp pure_fp16 with --optimizer_impl {args.optimizer_impl}: AdamW runs in fp16 (eps {eps:g}); use fused"
            )
        return torch.optim.AdamW(
            groups, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), eps=eps, **impl
        )
    except RuntimeError as error:  # e.g. fused kernels on a device without them
        raise ValueError(f"--optimizer_impl {args.optimizer_impl}: {error}") from None


def grad_scaler(args: TrainArguments, prec: Precision, device: torch.device) -> Any:
    if args.sharding == "fsdp":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device.type, enabled=prec.loss_scaling)
    return torch.amp.GradScaler(device.type, enabled=prec.loss_scaling)


def pycls_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """pycls's loss: soft cross-entropy on one-hot labels smoothed to 1 - s + s/C and s/C, which is
    torch's cross-entropy with label smoothing s; in fp32 whatever the logits' dtype."""
    return F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)


def topk_errors(
    logits: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...] = (1, 5)
) -> list[torch.Tensor]:
    """pycls's training statistics: the top-k error of the batch in percent, for each k, on the device."""
    ranked = logits.topk(min(max(ks), logits.shape[1]), dim=1).indices
    hits = ranked.eq(labels.view(-1, 1))
    return [(1.0 - hits[:, :k].any(dim=1).float().sum() / labels.shape[0]) * 100.0 for k in ks]


def step_statistics(
    loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor
) -> tuple[float, float, float]:
    """What pycls's train_epoch reads after every step: the loss and the top-1 and top-5 errors,
    averaged over the ranks (three asynchronous all-reduces, as its scaled_all_reduce issues them, none
    alone), then copied to the host one by one (three syncs)."""
    stats = [loss.detach(), *topk_errors(logits.detach(), labels)]
    world = dist.get_world_size() if dist.is_initialized() else 1
    if world > 1:
        for work in [dist.all_reduce(t, async_op=True) for t in stats]:
            work.wait()
        for tensor in stats:
            tensor.mul_(1.0 / world)
    value, top1, top5 = (tensor.item() for tensor in stats)
    return value, top1, top5


def check_labels(labels: torch.Tensor, num_classes: int) -> None:
    """pycls's one-hot labels assert every label is below the class count (a read on the device)."""
    if not bool(labels.max() < num_classes):
        raise ValueError(f"a label is {int(labels.max())}: the model has {num_classes} classes")


def pycls_lr(epoch: int, args: TrainArguments) -> float:
    """pycls's cosine policy with linear warmup, evaluated once per epoch as pycls does."""
    cosine = 0.5 * (1.0 + math.cos(math.pi * epoch / args.epochs))
    lr = args.learning_rate * ((1.0 - args.min_lr) * cosine + args.min_lr)
    if epoch < args.warmup_epochs:
        alpha = epoch / args.warmup_epochs
        lr *= args.warmup_factor * (1.0 - alpha) + alpha
    return lr


# ----------------------------------------------------------------------------------------------
# Training


def planned_steps(args: TrainArguments, steps_per_epoch: int) -> int:
    """The steps this run will train: the whole schedule, or max_steps if fewer."""
    schedule = steps_per_epoch * args.epochs
    return min(schedule, args.max_steps) if args.max_steps > 0 else schedule


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    loader: torch.utils.data.DataLoader,
    args: TrainArguments,
    prec: Precision,
    device: torch.device,
    logger: StepLogger,
    seen: dict[str, str],
    num_classes: int,
) -> int:
    """Train until max_steps or the end of the schedule; returns the number of steps. ``seen`` gets
    what the first step ran with (the software block's precision and data path) and what zero_grad
    left. Each step is pycls's train_epoch's (5719de6): the batch copied, the labels checked, forward
    and loss, zero_grad, backward and step, then (``--host_sync every_step``) the loss and the top-k
    errors all-reduced and read."""
    normalize = imagenet.DeviceNormalize(device, re_prob=0.0)
    every_step = args.host_sync == "every_step"
    set_to_none = args.zero_grad == "set_to_none"
    steps_per_epoch = len(loader)
    step = 0
    model.train()
    for epoch in range(args.epochs):
        imagenet.set_epoch(loader, epoch)
        lr = pycls_lr(epoch, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        for index, batch in enumerate(logger.batches(loader)):
            pixels = batch["pixel_values"]
            if pixels.dtype == torch.uint8:  # the kit's path: a quarter of the bytes, normalized here
                images = normalize(pixels.to(device, non_blocking=True)).to(prec.model_dtype)
            else:  # pycls's: normalized float32 from the workers, copied as its loop did (.cuda())
                images = pixels.to(device).to(prec.model_dtype)
            labels = batch["labels"].to(device, non_blocking=True)
            if every_step:
                check_labels(labels, num_classes)  # pycls: smooth_one_hot_labels's assert
            with prec.autocast(device):
                logits = model(images)
                if step == 0:
                    seen.update(
                        mixed_precision=software.precision_here(device.type, images.dtype),
                        data_path=data_path(loader, pixels),
                    )
            loss = pycls_loss(logits, labels, args.label_smoothing)
            optimizer.zero_grad(set_to_none=set_to_none)
            if step == 1:  # the gradients of the first step existed: what zero_grad left of them
                seen["zero_grad"] = software.zero_grad_left(model.parameters())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_value: torch.Tensor | float = loss
            if every_step:
                loss_value, _, _ = step_statistics(loss, logits, labels)
            step += 1
            done = 0 < args.max_steps <= step
            last = done or (epoch == args.epochs - 1 and index == steps_per_epoch - 1)
            logger.step(step, epoch + (index + 1) / steps_per_epoch, lr, loss_value, last=last)
            if done:
                return step
    return step


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    # 1. Parse arguments
    # FSDP's notices for the configuration chosen on purpose here (1 rank: NO_SHARD; fp32 LayerNorm units).
    lifecycle.quiet_notices(
        ".*switching to use `NO_SHARD`.*", ".*Both mixed precision and an auto_wrap_policy.*"
    )
    model_args, data_args, train_args, device_args = parse_args(argv)
    # Before anything asks cuBLAS whether it may use TF32 (the published rungs: on, as torch <= 1.11
    # had it by default in 2022; the recipe's assumptions give the sources).
    tf32 = lifecycle.set_tf32(PROG, device_args.tf32)
    lifecycle.require_accelerator(PROG)

    # 2. Join the process group, build and wrap the model, build the optimizer (problems: one line)
    device = accelerator_device()
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # pycls CUDNN.BENCHMARK: fixed shapes
    with one_line_errors(PROG, ValueError, KeyError):
        check_choice("sharding", train_args.sharding, SHARDINGS)
        prec = precision(train_args.amp)
        size = model_size(model_args)
        rank, world = init_process_group(device, single_process_group=True)
        random.seed(train_args.seed + rank)
        np.random.seed(train_args.seed + rank)
        torch.manual_seed(train_args.seed)  # the same initial weights on every rank
        model = build_model(model_args).to(device=device, dtype=prec.model_dtype)
        parameters = sum(p.numel() for p in model.parameters())
        attention = attention_in_effect(model, prec, device)
        model = wrap_model(model, train_args, prec, device)
        optimizer = build_optimizer(model, train_args, prec)
    if train_args.compile:
        model = torch.compile(model)
    scaler = grad_scaler(train_args, prec, device)

    # 3. Build the data loader (a given folder that cannot be read whole: one line)
    with one_line_errors(PROG, ValueError):
        loader, data_info = build_loader(
            data_args, model_args.img_size, train_args.per_device_train_batch_size, train_args.seed
        )

    # 4. Open the run directory
    run_dir = RunDir(train_args.output_dir, unit="img/s")
    run_dir.write_sysinfo(trainer=PROG, precision=tf32)
    record.departures(run_dir, data_info, optimizer, train_args)
    per_device = train_args.per_device_train_batch_size
    global_batch = per_device * world
    rung = (
        f"amp {prec.mode}, optimizer {train_args.optimizer}/{train_args.optimizer_impl}, classifier "
        f"{model_args.classifier}, layout {model_args.layout}, attention {model_args.attention} ({attention}), "
        f"input {data_args.input_pipeline}, "
        f"sharding {train_args.sharding}, compile {train_args.compile}, tf32 {tf32['tf32_matmul']}"
    )
    log(
        f"pycls ViT-{size} at {model_args.img_size}px ({parameters / 1e6:.2f}M parameters), batch {per_device} x "
        f"{world} = {global_batch}, {rung}, data {data_info['data']}, {dist.get_backend()} on {device}"
    )

    # 5. Count the FLOPs of one training sample (rank 0, before the first timed step)
    sample_flops = flops.count_on_main_process(lambda: flops_per_sample(model_args))

    # 6. Train
    logger = StepLogger(
        run_dir,
        train_args.throughput_warmup_steps,
        global_batch,
        train_args.logging_steps,
        total_steps=planned_steps(train_args, len(loader)),
        profile=device_args.profile,
    )
    seen: dict[str, str] = {}
    logger.watch(model, every_step=train_args.host_sync == "every_step")
    with imagenet.bad_images_named(PROG):
        train(
            model, optimizer, scaler, loader, train_args, prec, device, logger, seen, model_args.num_classes
        )
    logger.close()
    ran = record.software_in_effect(attention, optimizer, model, device, train_args, seen)

    # 7. Write the summary, last
    return record.write_summary(
        logger,
        (model_args, data_args, train_args, device_args),
        sample_flops,
        prec,
        tf32,
        ran,
        size,
        parameters,
        global_batch,
        optimizer,
        loader,
        data_info,
    )


if __name__ == "__main__":
    main()
