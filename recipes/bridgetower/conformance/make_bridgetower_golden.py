"""Regenerate recipes/bridgetower/conformance/bridgetower_golden.json from optimum-habana v1.7.0 and transformers 4.31.

    git clone https://github.com/huggingface/optimum-habana /path/to/optimum-habana   # has tag v1.7.0
    python -m venv side && side/bin/pip install torch torchvision numpy pillow "transformers==4.31.0" "tokenizers==0.13.3" "accelerate==0.21.0"
    side/bin/python recipes/bridgetower/conformance/make_bridgetower_golden.py --optimum-habana /path/to/optimum-habana

Nothing upstream is copied into the kit: the example script ``run_bridgetower.py`` is read from the
clone at the tag (``git show``) and only its ``Transform``, ``collate_fn`` and ``main``'s ``get_image``
are executed (the script imports optimum.habana, which needs Habana's stack, so it is not imported
whole). transformers 4.31 (the release optimum-habana 1.7.0 pins) gives the loss of a tiny
BridgeTowerForContrastiveLearning whose parameters follow ``weights.py``'s rule, and its Trainer's
default optimizer: its parameter groups, one step and its learning-rate schedule. The inputs are fixed: the two JPEGs committed in the fixture (one RGB, one grey).
The Trainer needs accelerate (4.31 asks for it at run time, not as a dependency): 0.21.0, the release
of 4.31's month. Last, the Trainer's loop itself trains the tiny model four steps in one process and
in two (looprecord.py): what each step makes a GPU wait for, which tests/test_conformance_loop.py
holds the kit's published cells to. ``--loop-only`` records the loop again and keeps the rest.

torchvision: the 2023 runs had torchvision 0.15-0.16, whose tensor Resize did not antialias unless
asked; today's antialiases by default. The upstream Transform is run with that 2023 default restored
(Resize's antialias=False), which is what it computed then.
"""

from __future__ import annotations

import argparse
import ast
import base64
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This publication's folder, then the conformance helpers every publication shares (tests/conformance/).
sys.path[:0] = [str(HERE), str(HERE.parents[2] / "tests" / "conformance")]

from weights import deterministic_  # noqa: E402

REPOSITORY, TAG = "huggingface/optimum-habana", "v1.7.0"
SCRIPT = "examples/contrastive-image-text/run_bridgetower.py"
IMAGE_SIZE = 28
UPSTREAM_MODULES: tuple[str, ...] = ()  # the example script is read from the clone, not imported
TINY = {
    "text_config": {"vocab_size": 99, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                    "intermediate_size": 64, "max_position_embeddings": 40},
    "vision_config": {"hidden_size": 64, "num_hidden_layers": 1, "patch_size": 14, "image_size": IMAGE_SIZE},
    "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 1,
    "contrastive_hidden_size": 32, "logit_scale_init_value": 2.6592,
}  # fmt: skip
# The parameters whose first-step updates the fixture keeps (a weight with decay, a bias and a
# LayerNorm weight without, the learnable logit scale), and the schedule's length.
STEP_PARAMS = (
    "bridgetower.text_model.encoder.layer.0.attention.self.query.weight",
    "bridgetower.text_model.encoder.layer.0.attention.self.query.bias",
    "bridgetower.vision_model.visual.ln_post.weight",
    "logit_scale",
)
SCHEDULE_STEPS = 6
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def golden_jpegs() -> list[bytes]:
    """An RGB and a one-band JPEG (the cartoons are both kinds)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(5)
    out = []
    for mode, shape in (("RGB", (40, 60, 3)), ("L", (70, 45))):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def upstream_functions(source: str) -> dict:
    """Transform, collate_fn and main's get_image from the script's text, executed without the rest."""
    import torch
    from torchvision.io import ImageReadMode, read_image
    from torchvision.transforms import CenterCrop, ConvertImageDtype, InterpolationMode, Normalize, Resize
    from torchvision.transforms.functional import to_grayscale, to_tensor

    class Resize2023(Resize):  # torchvision 0.15-0.16's default for tensors
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("antialias", False)
            super().__init__(*args, **kwargs)

    tree = ast.parse(source)
    wanted = [
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name in ("Transform", "collate_fn")
    ]
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    wanted += [n for n in ast.walk(main) if isinstance(n, ast.FunctionDef) and n.name == "get_image"]
    namespace = {"torch": torch, "Resize": Resize2023, "CenterCrop": CenterCrop, "ConvertImageDtype": ConvertImageDtype,
                 "Normalize": Normalize, "InterpolationMode": InterpolationMode, "to_tensor": to_tensor,
                 "to_grayscale": to_grayscale, "read_image": read_image, "ImageReadMode": ImageReadMode}  # fmt: skip
    exec(compile(ast.Module(body=wanted, type_ignores=[]), SCRIPT, "exec"), namespace)  # noqa: S102
    return namespace


def summary(tensor) -> dict:
    """Enough of an image tensor to catch any change of its path: shape, sums, a 4x4 grid of pixels."""
    step = max(1, tensor.shape[-1] // 4)
    return {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype),
        "sum": tensor.double().sum().item(),
        "sum_of_squares": tensor.double().square().sum().item(),
        "grid": [round(v, 6) for v in tensor[:, ::step, ::step].flatten().tolist()],
    }


# The loop (looprecord.py): transformers 4.31's Trainer.train over LOOP_STEPS steps.
LOOP_STEPS, LOOP_LOGGING_STEPS, LOOP_WORLDS, LOOP_BATCH = 4, 2, (1, 2), 2
LOOP_FACTS = [
    "zero_grad: transformers 4.31's loop calls model.zero_grad() (trainer.py, _inner_training_loop) "
    "without set_to_none, so the torch beneath decides: torch 2.0 and later free the gradients "
    "(set_to_none=True, torch/nn/modules/module.py of v2.0.0), torch 1.x filled them with zeros. The "
    "GPU runs' torch is not named (NVIDIA's containers from 23.03 on carry torch 2.x); recorded here "
    "with torch 2's default.",
    "bf16: the published GPU cells train under bf16 autocast, which needs no loss scaler: no sync "
    "beyond those recorded in fp32 on the CPU.",
]


def loop_rank(rank: int, world: int, source: str) -> dict:
    """One rank of the Trainer's loop on the example's collated batches, recorded."""
    import looprecord
    import torch
    from accelerate.data_loader import DataLoaderShard
    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning, Trainer, TrainingArguments

    upstream = upstream_functions(source)
    generator = torch.Generator().manual_seed(rank)
    rows = [
        {
            "pixel_values": torch.randn(3, IMAGE_SIZE, IMAGE_SIZE, generator=generator),
            "input_ids": [0, 5 + index % 7, 7, 2],
            "attention_mask": [1, 1, 1, 1],
        }
        for index in range(LOOP_STEPS * LOOP_BATCH * world)
    ]
    model = BridgeTowerForContrastiveLearning(BridgeTowerConfig(**TINY))
    deterministic_(dict(model.named_parameters()))
    # The published command's training arguments that decide the loop (run_bridgetower's README):
    # no unused columns removed, its logging interval; fp32 on the CPU; no checkpoints.
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=LOOP_BATCH, max_steps=LOOP_STEPS,
        logging_steps=LOOP_LOGGING_STEPS, learning_rate=1e-5, remove_unused_columns=False, report_to=[],
        save_strategy="no", disable_tqdm=True, dataloader_num_workers=0, no_cuda=True,
    )  # fmt: skip
    recorder = looprecord.Recorder()
    with recorder.recording(), recorder.fetches(DataLoaderShard):
        recorder.on_device(model)
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=upstream["collate_fn"])
        trainer.train()

    def logged(step: int) -> bool:
        return step % LOOP_LOGGING_STEPS == 0

    return looprecord.sequences(recorder, logged, LOOP_STEPS)


# The recipe's published variant whose loop the kit's is held to (tests/test_conformance_loop.py).
LOOP_VARIANT = "workers2"


def record_loop(source: str) -> dict:
    import looprecord

    return {
        "variant": LOOP_VARIANT,
        "steps": LOOP_STEPS,
        "logging_steps": LOOP_LOGGING_STEPS,
        "worlds": {
            str(world): looprecord.in_ranks(world, loop_rank, source, env=True) for world in LOOP_WORLDS
        },
        "facts": LOOP_FACTS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-habana", required=True, help="a clone of huggingface/optimum-habana")
    parser.add_argument("--out", default=str(HERE / "bridgetower_golden.json"))
    parser.add_argument(
        "--loop-only", action="store_true", help="record the Trainer's loop again, keep the other values"
    )
    args = parser.parse_args()
    import torch
    import torchvision
    import transformers
    from PIL import Image

    git = ["git", "-C", args.optimum_habana]
    commit = subprocess.run(
        [*git, "rev-parse", f"{TAG}^{{commit}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    source = subprocess.run(
        [*git, "show", f"{commit}:{SCRIPT}"], capture_output=True, text=True, check=True
    ).stdout
    if args.loop_only:
        golden = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
        golden["loop"] = record_loop(source)
        Path(args.out).write_text(json.dumps(golden, indent=1) + "\n")
        print(f"wrote the loop into {args.out}")
        return
    upstream = upstream_functions(source)
    transform = upstream["Transform"](IMAGE_SIZE, CLIP_MEAN, CLIP_STD)
    jpegs = golden_jpegs()
    examples, images = [], []
    for data in jpegs:
        image = Image.open(io.BytesIO(data))
        image.load()  # as datasets hands a decoded image over
        pixels = transform(upstream["get_image"](image))
        images.append({"mode": image.mode, **summary(pixels)})
        examples.append({"pixel_values": pixels, "input_ids": [0, 5, 7, 2], "attention_mask": [1, 1, 1, 1]})
    batch = upstream["collate_fn"](examples)
    collated = {
        k: ({"shape": list(v.shape), "dtype": str(v.dtype)} if torch.is_tensor(v) else v)
        for k, v in batch.items()
    }

    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning, Trainer, TrainingArguments

    model = BridgeTowerForContrastiveLearning(BridgeTowerConfig(**TINY))
    deterministic_(dict(model.named_parameters()))
    model.eval()  # dropout off: the loss is then a function of the inputs alone (gradients still flow)
    inputs = {
        "input_ids": torch.tensor([[0, 5, 7, 9, 2], [0, 11, 3, 2, 1]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]),
        "pixel_values": torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(2)),
    }
    output = model(**inputs, return_loss=True)
    output.loss.backward()
    training_args = TrainingArguments(output_dir="/tmp/unused", learning_rate=1e-5, report_to=[])
    trainer = Trainer(model=model, args=training_args)
    trainer.create_optimizer()
    optimizer = trainer.optimizer
    # One step of that optimizer from the gradients above, and the schedule the Trainer makes for a
    # run of SCHEDULE_STEPS steps (the published command's: linear to zero, no warm-up).
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer.step()
    updates = {name: (p.detach() - before[name]).double() for name, p in model.named_parameters()}
    scheduler = trainer.create_scheduler(num_training_steps=SCHEDULE_STEPS, optimizer=optimizer)
    learning_rates = []
    for _ in range(SCHEDULE_STEPS):
        learning_rates.append(scheduler.get_last_lr()[0])
        scheduler.step()
    golden = {
        "upstream": {"repository": REPOSITORY, "tag": TAG, "commit": commit, "script": SCRIPT},
        "made_with": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "resize_antialias": False,
        },  # fmt: skip
        "command": "python recipes/bridgetower/conformance/make_bridgetower_golden.py --optimum-habana /path/to/optimum-habana",
        "config": {"image_size": IMAGE_SIZE, "tiny": TINY, "mean": CLIP_MEAN, "std": CLIP_STD},
        "jpegs": [base64.b64encode(data).decode() for data in jpegs],
        "images": images,
        "collate": collated,
        "loss": output.loss.item(),
        "logit_scale": model.logit_scale.item(),
        "grad_norm_total": torch.norm(
            torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])
        ).item(),
        "optimizer": {
            "optim": str(training_args.optim.value),
            "class": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
            "param_groups": [
                {"params": len(g["params"]), "weight_decay": g["weight_decay"], "eps": g["eps"]}
                for g in optimizer.param_groups
            ],
            "first_step": {
                "update_norm_total": torch.norm(torch.stack([u.norm() for u in updates.values()])).item(),
                "updates": {
                    name: [round(v, 12) for v in updates[name].flatten()[:4].tolist()] for name in STEP_PARAMS
                },
            },
            "learning_rates": learning_rates,
        },  # fmt: skip
        # The Trainer's loop: what it makes a GPU wait for, step by step (looprecord.py).
        "loop": record_loop(source),
    }
    # What this run loaded that nothing else asks for: the install line must name it all.
    import environment

    golden["made_with"]["loaded_roots"] = environment.loaded_roots()
    Path(args.out).write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
