"""Regenerate recipes/vit-speedups/conformance/vit_golden.json from facebookresearch/pycls itself.

    git clone https://github.com/facebookresearch/pycls /path/to/pycls     # any clone with the commits
    python -m venv side && side/bin/pip install torch numpy yacs iopath simplejson opencv-python-headless matplotlib submitit fairscale
    side/bin/python recipes/vit-speedups/conformance/make_vit_golden.py --pycls /path/to/pycls

Nothing of pycls is copied into the kit: each pinned commit's ``pycls/`` is exported from the given
clone (``git archive``) into a temporary folder and imported from there, in its own process. The
inputs are small and fixed (a tiny ViT whose every parameter is set by ``weights.py``'s rule, three
images, three labels, two JPEGs committed in the fixture) so the values are deterministic; the fixture
records the repository, the commits, the torch and numpy the values were made with, this command,
and the distributions the run loaded (``loaded_roots``; pycls imports submitit, and its trainer
fairscale, wherever they are used).

What is recorded: for each classifier (token, pooled) and layout (batch-first: pycls before its
batch-second commit; batch-second: after it) the logits, the loss with pycls's label smoothing, each
parameter's gradient norm and its norm after one step of pycls's optimizer (OPTIM.MTA: the multi-tensor
AdamW) with its parameter groups; pycls's learning rate per epoch; and its training data path on the
two JPEGs (AutoAugment off: pycls's own AutoAugment draws with Python's random, the kit's is timm's);
and pycls's training loop itself at main's commit (train_epoch, four steps in one process and in
two): what each step makes a GPU wait for (looprecord.py; tests/test_conformance_loop.py).
torch 2 runs pycls's nn.MultiheadAttention(need_weights=False) on fused SDPA where torch 1.x ran bmm,
softmax, bmm: the values agree to float rounding; which kernels ran is tested by dispatch, not here.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This publication's folder, then the conformance helpers every publication shares (tests/conformance/).
sys.path[:0] = [str(HERE), str(HERE.parents[2] / "tests" / "conformance")]

import environment  # noqa: E402
from weights import deterministic_, images, jpegs  # noqa: E402

REPOSITORY = "facebookresearch/pycls"
# batch-first: the commit before "Use batch-second tensor layout in ViT" (484bb29); batch-second: main.
COMMITS = {"batch_first": "526685d", "batch_second": "5719de641657c251f807c20a1fcf8ef6f4b60144"}
TINY = {"PATCH_SIZE": 16, "NUM_LAYERS": 2, "NUM_HEADS": 2, "HIDDEN_DIM": 32, "MLP_DIM": 64}
IM_SIZE, NUM_CLASSES, LABELS = 32, 10, [1, 4, 7]
# pycls's ViT recipe (configs/fsdp/example.yaml) where it matters here.
OPTIM = {"BASE_LR": 1e-3, "MIN_LR": 0.005, "MAX_EPOCH": 100, "WARMUP_EPOCHS": 5, "WEIGHT_DECAY": 0.24}
DATA_SIZE = 16  # the data transform's crop: small enough to keep in the fixture whole
# The upstream checkout's modules (not distributions): what the install line need not name.
UPSTREAM_MODULES = ("pycls",)
DATA_SEEDS = [3, 11]


def configure(classifier: str) -> None:
    from pycls.core.config import cfg

    cfg.MODEL.TYPE, cfg.MODEL.NUM_CLASSES = "vit", NUM_CLASSES
    for key, value in TINY.items():
        setattr(cfg.VIT, key, value)
    cfg.VIT.CLASSIFIER_TYPE = classifier
    cfg.TRAIN.IM_SIZE, cfg.TRAIN.LABEL_SMOOTHING, cfg.TRAIN.AUGMENT = IM_SIZE, 0.1, ""
    cfg.LN.EPS, cfg.LN.USE_CUSTOM_WEIGHT_DECAY, cfg.LN.CUSTOM_WEIGHT_DECAY = 1e-6, True, 0.0
    cfg.OPTIM.OPTIMIZER, cfg.OPTIM.LR_POLICY, cfg.OPTIM.MTA = "adamw", "cos", True
    cfg.OPTIM.BIAS_USE_CUSTOM_WEIGHT_DECAY, cfg.OPTIM.BIAS_CUSTOM_WEIGHT_DECAY = True, 0.0
    for key, value in OPTIM.items():
        setattr(cfg.OPTIM, key, value)


def multi_tensor_alias() -> None:
    """torch 1.12-2.x defined _multi_tensor.AdamW as AdamW(foreach=True); today's torch dropped the
    alias. pycls's OPTIM.MTA asks for it by that name."""
    import torch

    if not hasattr(torch.optim, "_multi_tensor"):
        import types
        from functools import partial

        torch.optim._multi_tensor = types.SimpleNamespace(AdamW=partial(torch.optim.AdamW, foreach=True))


def worker(layout: str) -> dict:
    """In a process whose sys.path starts with one commit's export: pycls's own values."""
    import numpy as np
    import torch

    multi_tensor_alias()
    from pycls.core import builders, net
    from pycls.core import optimizer as optim
    from pycls.models.vit import ViT

    out: dict = {"models": {}}
    for classifier in ("token", "pooled"):
        configure(classifier)
        model = ViT()
        deterministic_(dict(model.named_parameters()))
        logits = model(images(IM_SIZE))
        labels = torch.tensor(LABELS)
        loss = builders.build_loss_fun()(logits, net.smooth_one_hot_labels(labels))
        loss.backward()
        optimizer = optim.construct_optimizer(model)
        optim.set_lr(optimizer, optim.get_epoch_lr(0))
        decay = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
        optimizer.step()
        named = dict(model.named_parameters())
        out["models"][classifier] = {
            "logits": logits.detach().flatten().tolist(),
            "loss": loss.item(),
            "grad_norm": {n: p.grad.norm().item() for n, p in named.items()},
            "weight_decay": {n: decay[id(p)] for n, p in named.items()},
            "norm_after_step": {n: p.detach().norm().item() for n, p in named.items()},
        }
    out["lr_per_epoch"] = [optim.get_epoch_lr(epoch) for epoch in range(12)]

    import cv2
    from pycls.core.config import cfg
    from pycls.datasets.imagenet import ImageNet

    cfg.TRAIN.IM_SIZE = DATA_SIZE
    dataset = ImageNet.__new__(ImageNet)  # no folder to index: only its per-image preparation runs
    dataset._split = "train"
    out["data"] = []
    for data, seed in zip(jpegs(), DATA_SEEDS, strict=True):
        np.random.seed(seed)
        prepared = dataset._prepare_im(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
        out["data"].append({"seed": seed, "shape": list(prepared.shape), "dtype": str(prepared.dtype),
                            "values": [round(float(v), 6) for v in prepared.flatten()]})  # fmt: skip
    out["loaded_roots"] = environment.loaded_roots()
    return out


# The recipe's published variant whose loop the kit's is held to (tests/test_conformance_loop.py).
LOOP_VARIANT = "baseline"
# The loop (looprecord.py): pycls's train_epoch over LOOP_STEPS batches at main's commit.
LOOP_STEPS, LOOP_LOG_PERIOD, LOOP_WORLDS, LOOP_BATCH = 4, 2, (1, 2), 3
# torch 1.9-1.11 (what the publication ran): Optimizer.zero_grad(self, set_to_none: bool = False)
# (torch/optim/optimizer.py of v1.11.0); pycls's train_epoch calls optimizer.zero_grad().
TORCH_1_ZERO_GRAD_SET_TO_NONE = False
LOOP_FACTS = [
    "zero_grad: pycls's train_epoch calls optimizer.zero_grad(), whose default on torch 1.9-1.11 was "
    "set_to_none=False (torch/optim/optimizer.py, v1.11.0): gradients filled with zeros.",
    "amp: with TRAIN.MIXED_PRECISION the loop's torch.cuda.amp.GradScaler reads found_inf with .item() "
    "in every scaler.step: one more sync a step on a GPU, not recordable on the CPU (the scaler is off "
    "there).",
    "fsdp: the FSDP rungs ran fairscale's FullyShardedDataParallel, whose hooks differ from torch's "
    "FSDP by construction; the recorded loop is the DDP one (the ladder's baseline).",
]


def loop_rank(rank: int, world: int) -> dict:
    """One rank of pycls's train_epoch, recorded (a process of its own for each rank of two)."""
    from copy import deepcopy

    import looprecord
    import numpy as np
    import torch
    import torch.cuda.amp as amp
    from pycls.core import builders, meters, trainer
    from pycls.core import optimizer as optim
    from pycls.core.config import cfg

    multi_tensor_alias()
    configure("token")
    cfg.NUM_GPUS, cfg.LOG_PERIOD, cfg.TRAIN.BATCH_SIZE = world, LOOP_LOG_PERIOD, LOOP_BATCH * world
    cfg.TRAIN.MIXED_PRECISION = False  # fp32 on the CPU: the scaler is off (LOOP_FACTS)
    torch.manual_seed(0)
    np.random.seed(rank)
    model = builders.build_model()
    deterministic_(dict(model.named_parameters()))
    images_ = np.random.default_rng(rank).standard_normal(
        (LOOP_STEPS * LOOP_BATCH * world, 3, IM_SIZE, IM_SIZE)
    )
    dataset = [(image.astype(np.float32), index % NUM_CLASSES) for index, image in enumerate(images_)]
    sampler = (
        torch.utils.data.DistributedSampler(dataset) if world > 1 else torch.utils.data.RandomSampler(dataset)
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=LOOP_BATCH, sampler=sampler, drop_last=True)
    recorder = looprecord.Recorder(zero_grad_default=TORCH_1_ZERO_GRAD_SET_TO_NONE)
    with recorder.recording():
        # pycls's setup_model and train_model, in their order (trainer.py): the model on the device,
        # DDP over it, the EMA copy, the loss, the optimizer, the meter, the scaler.
        recorder.on_device(model)
        ema = deepcopy(model)
        if world > 1:
            model = torch.nn.parallel.DistributedDataParallel(module=model)
        loss_fun = builders.build_loss_fun()
        optimizer = optim.construct_optimizer(model)
        meter = meters.TrainMeter(len(loader))
        scaler = amp.GradScaler(enabled=cfg.TRAIN.MIXED_PRECISION)
        trainer.train_epoch(recorder.loader(loader), model, ema, loss_fun, optimizer, scaler, meter, 0)

    def logged(step: int) -> bool:  # meter.log_iter_stats: (cur_iter + 1) % LOG_PERIOD == 0
        return step % LOOP_LOG_PERIOD == 0

    return looprecord.sequences(recorder, logged, LOOP_STEPS)


def loop_worker() -> dict:
    """In a process whose sys.path starts with main's export: pycls's loop in one and two ranks."""
    import looprecord

    worlds = {str(world): looprecord.in_ranks(world, loop_rank) for world in LOOP_WORLDS}
    return {
        "steps": LOOP_STEPS,
        "log_period": LOOP_LOG_PERIOD,
        "worlds": worlds,
        "facts": LOOP_FACTS,
        "loaded_roots": environment.loaded_roots(),
    }


def worker_output(result: subprocess.CompletedProcess) -> dict:
    """A worker's JSON, or its error's last lines and a non-zero exit."""
    if result.returncode != 0:
        raise SystemExit(f"make_vit_golden.py: a worker failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pycls", help="a clone of facebookresearch/pycls")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(HERE / "vit_golden.json"))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(loop_worker() if args.worker == "loop" else worker(args.worker)))
        return
    import numpy
    import torch

    golden: dict = {
        "upstream": {"repository": REPOSITORY, "commits": {}},
        "made_with": {
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "python": sys.version.split()[0],
        },
        "command": "python recipes/vit-speedups/conformance/make_vit_golden.py --pycls /path/to/pycls",
        "config": {
            "vit": TINY,
            "im_size": IM_SIZE,
            "num_classes": NUM_CLASSES,
            "labels": LABELS,
            "optim": OPTIM,
            "label_smoothing": 0.1,
            "data_size": DATA_SIZE,
        },  # fmt: skip
        "jpegs": [base64.b64encode(data).decode() for data in jpegs()],
        "layouts": {},
    }
    for layout, commit in COMMITS.items():
        full = subprocess.run(
            ["git", "-C", args.pycls, "rev-parse", commit], capture_output=True, text=True, check=True
        ).stdout.strip()
        golden["upstream"]["commits"][layout] = full
        with tempfile.TemporaryDirectory() as export:
            archive = subprocess.run(
                ["git", "-C", args.pycls, "archive", full, "pycls"], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", export], input=archive.stdout, check=True)
            result = subprocess.run(
                [sys.executable, __file__, "--worker", layout],
                capture_output=True, text=True, env={"PYTHONPATH": export, "PATH": "/usr/bin:/bin"},
            )  # fmt: skip
        golden["layouts"][layout] = worker_output(result)
        if layout == "batch_second":  # the training loop, at main's commit (looprecord.py)
            with tempfile.TemporaryDirectory() as export:
                archive = subprocess.run(
                    ["git", "-C", args.pycls, "archive", full, "pycls"], capture_output=True, check=True
                )
                subprocess.run(["tar", "-x", "-C", export], input=archive.stdout, check=True)
                result = subprocess.run(
                    [sys.executable, __file__, "--worker", "loop"],
                    capture_output=True, text=True, env={"PYTHONPATH": export, "PATH": "/usr/bin:/bin"},
                )  # fmt: skip
            golden["loop"] = {"variant": LOOP_VARIANT, **worker_output(result)}
    # What the runs loaded that nothing else asks for: the install line must name it all.
    golden["made_with"]["loaded_roots"] = sorted(
        {
            *golden["loop"].pop("loaded_roots"),
            *(n for r in golden["layouts"].values() for n in r.pop("loaded_roots")),
        }
    )
    # The learning rate and the data path are the same at both commits: kept once, from main's.
    for key in ("lr_per_epoch", "data"):
        golden[key] = golden["layouts"]["batch_second"].pop(key)
        del golden["layouts"]["batch_first"][key]
    Path(args.out).write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
