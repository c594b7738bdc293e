"""Make the VOLO conformance fixture (volo_golden.json) from the publication's own code.

    git clone https://github.com/sail-sg/volo /path/to/volo && git -C /path/to/volo checkout cf35775
    git clone https://github.com/zihangJiang/TokenLabeling /path/to/tlt && git -C /path/to/tlt checkout 9dbfd59
    python -m venv side && side/bin/pip install torch torchvision "timm==0.4.5" "numpy<1.24" scipy pyyaml
    side/bin/python recipes/volo/conformance/make_volo_golden.py --volo /path/to/volo --tokenlabeling /path/to/tlt

Runs in an environment of the publication's libraries, outside the kit's: timm 0.4.5 (what
sail-sg/volo's README and the toolbox's requirements.txt pin), numpy < 1.24 (sail-sg/volo's
MixToken calls np.int), scipy (the toolbox imports it), pyyaml (main.py does), and a torch. It
imports the upstream code
from the two checkouts, exactly as they are (a checkout with local changes is refused), feeds it
the fixed inputs of volo_inputs.py on the CPU in float32, and writes what it computes with the
checkouts' commits, the packages' versions and this command line, so that
recipes/volo/tests/test_conformance_volo.py can hold the kit's trainer to it without any network or upstream
code. Nothing of the upstream code is copied into the kit.

What is recorded: a tiny VOLO's outputs for a fixed MixToken box and the gradient norm of every
parameter after the token-label loss; the loss with and without --ground-truth; the token-label
targets of given crops and flips; main.py's learning rate per epoch for the D1 recipes; the
parameter groups of timm's AdamW factory; the update of each parameter over two AdamW steps; and
main.py's training loop itself (train_one_epoch with the toolbox's prefetcher, four steps in one
process and in two): what each step makes a GPU wait for (looprecord.py), which
tests/test_conformance_loop.py holds the kit's published loop to. ``--loop-only`` records the loop
again and keeps the other values.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).resolve().parent / "volo_golden.json"
DIGITS = 8  # significant digits kept: float32 carries about 7
# The upstream checkouts' modules (not distributions): what the install line need not name.
UPSTREAM_MODULES = ("main", "loss", "models", "tlt")


def rounded(value: Any) -> Any:
    """Tensors and floats as nested lists of floats with DIGITS significant digits."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def checkout(path: Path, repository: str) -> dict[str, str]:
    """The commit of a clean git checkout; a checkout with local changes does not make fixtures."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    if git("status", "--porcelain", "--untracked-files=no"):
        raise SystemExit(
            f"make_volo_golden.py: error: {path} has local changes; check out a commit of {repository} as is"
        )
    return {
        "repository": repository,
        "commit": git("rev-parse", "HEAD"),
        "committed": git("log", "-1", "--format=%cI"),
    }


def upstream_model(VOLO: type) -> Any:
    import volo_inputs as inputs

    layers = inputs.ARCHITECTURE["layers"]
    return VOLO(
        layers,
        img_size=inputs.IMG_SIZE,
        num_classes=inputs.NUM_CLASSES,
        stem_hidden_dim=inputs.ARCHITECTURE["stem_hidden_dim"],
        embed_dims=inputs.ARCHITECTURE["embed_dims"],
        num_heads=inputs.ARCHITECTURE["num_heads"],
        mlp_ratios=[inputs.MLP_RATIO] * len(layers),
        downsamples=[True, False, False, False],
        outlook_attention=[True, False, False, False],
        post_layers=["ca", "ca"],
    )


# The loop (looprecord.py): main.py's train_one_epoch over LOOP_STEPS batches, logging every
# LOOP_LOG_INTERVAL (main.py logs at batch_idx % log_interval == 0 and at the last batch).
LOOP_STEPS, LOOP_LOG_INTERVAL, LOOP_WORLDS = 4, 2, (1, 2)


def loop_rank(rank: int, world: int, paths: list[str]) -> dict[str, Any]:
    """One rank of main.py's training loop, recorded (a process of its own for each rank of two)."""
    sys.path[:0] = [p for p in paths if p not in sys.path]
    from contextlib import suppress

    import main as volo_main
    import numpy as np
    import torch
    import volo_inputs as inputs
    from loss import TokenLabelCrossEntropy
    from models.volo import VOLO
    from timm.optim import create_optimizer
    from timm.scheduler import create_scheduler
    from tlt.data.loader import PrefetchLoader, fast_collate

    from tests.conformance import looprecord

    flags = ["/data", "--token-label", "--token-label-data", "/token-labels", "--token-label-size",
             str(inputs.LABEL_SIZE), "--log-interval", str(LOOP_LOG_INTERVAL), "--num-classes",
             str(inputs.NUM_CLASSES), "-b", str(inputs.BATCH)]  # fmt: skip
    args = volo_main.parser.parse_args(flags)
    # What main() derives before it trains (main.py: prefetcher, distributed, world size, rank).
    args.prefetcher, args.distributed = not args.no_prefetcher, world > 1
    args.world_size, args.local_rank, args.rank = world, rank, rank
    torch.manual_seed(rank)
    np.random.seed(rank)
    model = upstream_model(VOLO)
    inputs.fill_weights(model.state_dict(keep_vars=True).items())
    # Per sample, what the toolbox's loader hands the prefetcher: a uint8 CHW crop and its label
    # map with the crop's coordinates and the label in a third plane ([3, 5, H, W]).
    maps = inputs.label_maps().float()
    samples = []
    for index in range(LOOP_STEPS * inputs.BATCH * world):
        coords = torch.zeros_like(maps[0][0:1])
        coords[0, 0, 0, :4] = torch.tensor(inputs.CROPS[index % 3])
        coords[0, 0, 0, 5] = inputs.LABELS[index % 3]
        image = np.random.randint(0, 256, (3, inputs.IMG_SIZE, inputs.IMG_SIZE), dtype=np.uint8)
        samples.append((image, torch.cat([maps[index % 3], coords])))
    sampler = torch.utils.data.distributed.DistributedSampler(samples) if world > 1 else None
    loader = torch.utils.data.DataLoader(
        samples, batch_size=inputs.BATCH, sampler=sampler, collate_fn=fast_collate, drop_last=True
    )
    recorder = looprecord.Recorder(zero_grad_default=TORCH_1_ZERO_GRAD_SET_TO_NONE)
    with recorder.recording():
        # main.py's order: the model on the device, the optimizer, DDP, the loss, the loader.
        recorder.on_device(model)
        optimizer = create_optimizer(args, model)
        if args.distributed:  # Apex's DDP in the publication (not installable): torch's, C++ hooks
            model = torch.nn.parallel.DistributedDataParallel(model)
        lr_scheduler, _ = create_scheduler(args, optimizer)
        loss_fn = TokenLabelCrossEntropy(dense_weight=args.dense_weight, cls_weight=args.cls_weight)
        prefetcher = PrefetchLoader(loader, re_prob=args.reprob, re_mode=args.remode, re_count=args.recount)
        volo_main.train_one_epoch(
            0, model, recorder.loader(prefetcher), optimizer, loss_fn, args, lr_scheduler=lr_scheduler,
            amp_autocast=suppress, loss_scaler=None,
        )  # fmt: skip

    def logged(step: int) -> bool:
        return (step - 1) % LOOP_LOG_INTERVAL == 0 or step == LOOP_STEPS

    return looprecord.sequences(recorder, logged, LOOP_STEPS)


# torch 1.7-1.11 (what the publication ran): Optimizer.zero_grad(self, set_to_none: bool = False)
# (torch/optim/optimizer.py of v1.11.0); main.py calls optimizer.zero_grad() without the argument.
TORCH_1_ZERO_GRAD_SET_TO_NONE = False


# The recipe's published variant whose loop the kit's is held to (tests/test_conformance_loop.py).
LOOP_VARIANT = "pretrain-d1"


def record_loop(paths: list[str]) -> dict[str, Any]:
    from tests.conformance import looprecord

    return {
        "variant": LOOP_VARIANT,
        "steps": LOOP_STEPS,
        "log_interval": LOOP_LOG_INTERVAL,
        "worlds": {str(world): looprecord.in_ranks(world, loop_rank, paths) for world in LOOP_WORLDS},
        "facts": LOOP_FACTS,
    }


# What the CPU cannot show, from upstream's lines (each checked by reading them).
LOOP_FACTS = [
    "zero_grad: main.py calls optimizer.zero_grad() (train_one_epoch), whose default on torch 1.7-1.11 "
    "was set_to_none=False (torch/optim/optimizer.py, v1.11.0): gradients filled with zeros, then "
    "accumulated into.",
    "amp: with --apex-amp the loss goes through ApexScaler (timm/utils/cuda.py), whose amp.scale_loss "
    "reads the overflow flag with .item() every step under dynamic loss scaling (apex/amp/scaler.py, "
    "LossScaler.update_scale); torch's GradScaler.step reads found_inf with .item() every step: one "
    "sync a step either way, not recordable on the CPU (fp32 there).",
    "ddp: with Apex installed main.py wraps the model in apex.parallel.DistributedDataParallel("
    "delay_allreduce=True), which registers a Python hook on each parameter's gradient accumulator "
    "(apex/parallel/distributed.py); the CPU record uses torch's DDP (hooks in C++), as the kit does.",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="make_volo_golden.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--volo", type=Path, required=True, help="a git checkout of sail-sg/volo")
    parser.add_argument(
        "--tokenlabeling", type=Path, required=True, help="a git checkout of zihangJiang/TokenLabeling"
    )
    parser.add_argument("--out", type=Path, default=FIXTURE)
    parser.add_argument(
        "--loop-only", action="store_true", help="record main.py's loop again, keep the other values"
    )
    args = parser.parse_args(argv)
    made_by = {
        "command": "python recipes/volo/conformance/make_volo_golden.py "
        + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
        "upstream": [
            checkout(args.volo, "sail-sg/volo"),
            checkout(args.tokenlabeling, "zihangJiang/TokenLabeling"),
        ],
        "packages": {name: importlib.metadata.version(name) for name in ("timm", "torch", "numpy")},
        "python": sys.version.split()[0],
        "device": "cpu, float32",
    }
    # The upstream checkouts, this folder (volo_inputs.py) and the checkout (tests/conformance's helpers).
    paths = [str(args.volo.resolve()), str(args.tokenlabeling.resolve()), str(FIXTURE.parent), str(ROOT)]
    sys.path[:0] = paths
    if args.loop_only:
        golden = json.loads(args.out.read_text()) if args.out.exists() else {}
        golden["loop"] = record_loop(paths)
        args.out.write_text(json.dumps(golden, indent=1) + "\n")
        print(f"wrote the loop into {args.out}")
        return

    # Upstream modules: sail-sg/volo's main.py (its argument parser holds the published defaults),
    # loss and model; timm 0.4.5's factories; the toolbox's target builder.
    import main as volo_main
    import numpy as np
    import torch
    import volo_inputs as inputs
    from loss import TokenLabelCrossEntropy, TokenLabelGTCrossEntropy
    from models.volo import VOLO
    from timm.optim import create_optimizer
    from timm.scheduler import create_scheduler
    from tlt.data import create_token_label_target

    torch.use_deterministic_algorithms(True)
    golden: dict[str, Any] = {"made_by": made_by}

    # Token-label targets: the toolbox's loader output for each crop (the map flipped with the
    # image, the crop stored beside it as (top, left, height, width) and the label at [2, 0, 0, 5]),
    # through main.py's create_token_label_target (placed on the CPU instead of 'cuda').
    maps = inputs.label_maps().float()  # the toolbox's dataset reads the float16 files as float32
    batch = []
    for score_map, crop, flipped, label in zip(
        maps, inputs.CROPS, inputs.FLIPPED, inputs.LABELS, strict=True
    ):
        score_map = score_map.flip(3) if flipped else score_map
        coords = torch.zeros_like(score_map[0:1])
        coords[0, 0, 0, :4] = torch.tensor(crop)
        coords[0, 0, 0, 5] = label
        batch.append(torch.cat([score_map, coords]))
    target = create_token_label_target(
        torch.stack(batch),
        num_classes=inputs.NUM_CLASSES,
        smoothing=inputs.SMOOTHING,
        label_size=inputs.LABEL_SIZE,
        device="cpu",
    )  # [B, C, 2 + tokens]: ground truth, class token, then the tokens
    golden["token_targets"] = {
        "gt": rounded(target[:, :, 0]),
        "cls": rounded(target[:, :, 1]),
        "dense": rounded(target[:, :, 2:].transpose(1, 2)),
    }

    # The model: outputs with MixToken on (its box drawn by the model from numpy's global state)
    # and every parameter's gradient norm after main.py's token-label loss.
    model = upstream_model(VOLO).train()
    inputs.fill_weights(model.state_dict(keep_vars=True).items())
    for seed in range(100):  # the first seed whose box mixes some tokens, not all
        np.random.seed(seed)
        box = model(inputs.images())[2]
        area = (box[2] - box[0]) * (box[3] - box[1])
        if 0 < area < inputs.LABEL_SIZE**2:
            break
    model.zero_grad()
    np.random.seed(seed)
    outputs = model(inputs.images())
    model_target = target[: inputs.BATCH]
    loss = TokenLabelCrossEntropy(dense_weight=0.5, cls_weight=1.0)(outputs, model_target)
    loss.backward()
    golden["model"] = {
        "numpy_seed": seed,
        "mix_box": [int(v) for v in outputs[2]],
        "cls_logits": rounded(outputs[0]),
        "token_logits": rounded(outputs[1]),
        "loss": rounded(loss.item()),
        "grad_norms": {name: rounded(p.grad.norm().item()) for name, p in model.named_parameters()},
    }
    with torch.no_grad():
        ground_truth = TokenLabelGTCrossEntropy(dense_weight=0.5, cls_weight=1.0)(outputs, model_target)
    golden["model"]["loss_ground_truth"] = rounded(ground_truth.item())

    # The schedule: main.py's parser with each recipe's flags, timm's create_scheduler, stepped
    # once per epoch as main.py steps it (lr_scheduler.step(epoch + 1) after each epoch).
    golden["schedules"] = {}
    for name, flags in inputs.SCHEDULES.items():
        main_args = volo_main.parser.parse_args(
            ["/data", *(f"--{k.replace('_', '-')}={v}" for k, v in flags.items())]
        )
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=main_args.lr)
        scheduler, epochs = create_scheduler(main_args, optimizer)
        lrs = []
        for epoch in range(epochs):
            lrs.append(optimizer.param_groups[0]["lr"])
            scheduler.step(epoch + 1)
        golden["schedules"][name] = {"flags": flags, "epochs": epochs, "lr_per_epoch": rounded(lrs)}

    # The optimizer: timm's create_optimizer with main.py's defaults, its groups by parameter name,
    # and each parameter's update over two steps with fixed gradients.
    model = upstream_model(VOLO)
    inputs.fill_weights(model.state_dict(keep_vars=True).items())
    flags = [f"--lr={inputs.OPTIMIZER['lr']}", f"--weight-decay={inputs.OPTIMIZER['weight_decay']}"]
    optimizer = create_optimizer(volo_main.parser.parse_args(["/data", *flags]), model)
    names = {id(p): name for name, p in model.named_parameters()}
    golden["optimizer"] = {
        "class": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
        "defaults": {
            k: rounded(optimizer.defaults[k]) for k in ("lr", "betas", "eps", "weight_decay", "amsgrad")
        },
        "groups": [
            {
                "weight_decay": rounded(group["weight_decay"]),
                "params": [names[id(p)] for p in group["params"]],
            }
            for group in optimizer.param_groups
        ],
        # torch <= 1.10 had no such flag: its AdamW looped over the tensors. Today's torch reads the
        # None timm leaves as its own default (the loop on the CPU, multi-tensor on CUDA).
        "foreach_given": optimizer.defaults.get("foreach"),
    }
    updates: dict[str, list[float]] = {name: [] for name in names.values()}
    for _ in range(inputs.OPTIMIZER["steps"]):
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        inputs.fill_gradients(model.named_parameters())
        optimizer.step()
        for name, p in model.named_parameters():
            updates[name].append(rounded((p.detach() - before[name]).norm().item()))
    golden["optimizer"]["update_norms"] = updates

    # The training loop itself: what main.py makes a GPU wait for, step by step (looprecord.py).
    golden["loop"] = record_loop(paths)

    # What this run loaded that nothing else asks for: the install line must name it all.
    from tests.conformance import environment

    golden["made_by"]["loaded_roots"] = environment.loaded_roots()
    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
