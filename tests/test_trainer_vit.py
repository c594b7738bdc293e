"""The ViT speedup-ladder trainer: each switch really changes the program, and a run writes its run dir."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, departures_of_the_run

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch import nn  # noqa: E402

from reprokit_trainers.common.process import distributed  # noqa: E402
from reprokit_trainers.vit import model as vit_model  # noqa: E402
from reprokit_trainers.vit import run_vit  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"
)

TRAINER = ["-m", "reprokit_trainers.vit"]  # run from ROOT, as a user would
IMG = 32  # a 2 x 2 patch grid at patch size 16


def tiny(**switches) -> vit_model.ViT:
    return vit_model.build_vit("tiny", {"image_size": IMG, "num_classes": 10}, **switches)


def randomize_head(model: vit_model.ViT) -> None:
    # pycls zero-initializes the head: every output would be 0 and every comparison trivially equal.
    nn.init.normal_(model.head.head_fc.weight)
    nn.init.normal_(model.head.head_fc.bias)


def train_args(**overrides) -> run_vit.TrainArguments:
    return run_vit.TrainArguments(output_dir="unused", **overrides)


@pytest.fixture
def process_group():
    """The trainer's 1-rank gloo group (what a run without torchrun joins), torn down afterwards."""
    rank, world = distributed.init_process_group(torch.device("cpu"), single_process_group=True)
    yield rank, world
    torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# Model switches


def test_pooled_classifier_has_no_class_token_and_both_give_class_logits():
    token, pooled = tiny(classifier="token"), tiny(classifier="pooled")
    names = {n for n, _ in token.named_parameters()}
    assert "class_token" in names and tuple(token.class_token.shape) == (1, 1, 32)
    assert "class_token" not in {n for n, _ in pooled.named_parameters()}
    assert "class_token" not in pooled.state_dict()
    # The class token is one more position: 4 patches + 1 vs 4.
    assert tuple(token.pos_embedding.shape) == (1, 5, 32)
    assert tuple(pooled.pos_embedding.shape) == (1, 4, 32)
    assert sum(p.numel() for p in token.parameters()) - sum(p.numel() for p in pooled.parameters()) == 32 + 32
    images = torch.randn(3, 3, IMG, IMG)
    for model in (token, pooled):
        randomize_head(model)
        assert tuple(model(images).shape) == (3, 10)


def test_pooled_classifier_averages_the_tokens_and_token_reads_the_first():
    torch.manual_seed(0)
    images = torch.randn(2, 3, IMG, IMG)
    for classifier in ("token", "pooled"):
        model = tiny(classifier=classifier)
        randomize_head(model)
        seen = {}
        model.head.register_forward_pre_hook(lambda _m, args, seen=seen: seen.update(features=args[0]))
        encoded = model.encoder(model.embed(images))  # (N, L, E)
        model(images)
        expected = encoded[:, 0] if classifier == "token" else encoded.mean(dim=1)
        torch.testing.assert_close(seen["features"], expected)


@pytest.mark.parametrize("classifier", ["token", "pooled"])
def test_batch_second_feeds_seq_batch_dim_to_attention_and_computes_the_same(classifier):
    torch.manual_seed(0)
    images = torch.randn(3, 3, IMG, IMG)
    reference = tiny(classifier=classifier)
    randomize_head(reference)
    outputs, shapes = {}, {}
    for layout in ("batch_first", "batch_second"):
        model = tiny(classifier=classifier, layout=layout)
        model.load_state_dict(reference.state_dict())  # the same weights, whatever the layout
        seen = []
        for module in model.modules():
            if isinstance(module, nn.MultiheadAttention):
                assert module.batch_first == (layout == "batch_first")
                module.register_forward_pre_hook(
                    lambda _m, args, seen=seen: seen.append(tuple(args[0].shape))
                )
        outputs[layout] = model(images)
        shapes[layout] = set(seen)
        assert len(seen) == 2  # one call per block
    seq = 5 if classifier == "token" else 4
    assert shapes == {"batch_first": {(3, seq, 32)}, "batch_second": {(seq, 3, 32)}}
    torch.testing.assert_close(outputs["batch_first"], outputs["batch_second"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["batch_first", "batch_second"])
def test_sdpa_attention_bypasses_multihead_attention_and_computes_the_same(layout):
    torch.manual_seed(0)
    images = torch.randn(2, 3, IMG, IMG)
    mha = tiny(layout=layout, attention="mha")
    randomize_head(mha)
    sdpa = tiny(layout=layout, attention="sdpa")
    sdpa.load_state_dict(mha.state_dict())
    calls = []
    for module in sdpa.modules():
        if isinstance(module, nn.MultiheadAttention):
            module.register_forward_pre_hook(lambda *_: calls.append(1))
    torch.testing.assert_close(sdpa(images), mha(images), rtol=1e-5, atol=1e-5)
    assert calls == []  # the weights are MultiheadAttention's, its forward is not called


def test_sizes_are_pycls_vit_b16_and_l16():
    b16 = vit_model.vit_config("b16")
    assert (b16.n_layers, b16.n_heads, b16.hidden_d, b16.mlp_d, b16.patch_size) == (12, 12, 768, 3072, 16)
    l16 = vit_model.vit_config("l16")
    assert (l16.n_layers, l16.n_heads, l16.hidden_d, l16.mlp_d, l16.patch_size) == (24, 16, 1024, 4096, 16)
    with pytest.raises(ValueError, match="layout"):
        vit_model.vit_config("tiny", layout="batch_last")


# ----------------------------------------------------------------------------------------------
# Optimizer implementations


def adam_kernels() -> tuple[object, dict[str, str]]:
    """The module AdamW's step dispatches from, and its per-tensor / multi-tensor / fused functions."""
    module = sys.modules[torch.optim.AdamW.step.__module__]
    suffix = "adamw" if hasattr(module, "_single_tensor_adamw") else "adam"
    return module, {
        "loop": f"_single_tensor_{suffix}",
        "foreach": f"_multi_tensor_{suffix}",
        "fused": f"_fused_{suffix}",
    }


def steps_with(impl: str, monkeypatch, steps: int = 3) -> tuple[list[torch.Tensor], set[str]]:
    torch.manual_seed(0)
    model = tiny(classifier="pooled")
    optimizer = run_vit.build_optimizer(
        model, train_args(optimizer_impl=impl, learning_rate=1e-2), run_vit.precision("no")
    )
    module, kernels = adam_kernels()
    called: set[str] = set()
    for name, attr in kernels.items():
        original = getattr(module, attr)

        def spy(*args, _name=name, _original=original, **kwargs):
            called.add(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, attr, spy)
    # The same gradients for every implementation, so only the optimizer's arithmetic differs (a
    # forward pass would feed back rounding differences that Adam amplifies near zero gradients).
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for param in model.parameters():
            param.grad = torch.randn(param.shape, generator=generator)
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()], called


def test_foreach_and_fused_adamw_run_their_own_kernels_and_match_the_loop(monkeypatch):
    loop, called = steps_with("loop", monkeypatch)
    assert called == {"loop"}
    for impl in ("foreach", "fused"):  # fused AdamW has CPU kernels in this torch
        params, called = steps_with(impl, monkeypatch)
        assert called == {impl}
        for a, b in zip(loop, params, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_weight_decay_spares_biases_and_layernorms_as_pycls():
    model = tiny()
    decay, no_decay = run_vit.param_groups(model, 0.24)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in no_decay["params"]} >= {"encoder.ln.weight", "encoder.block_0.ln_1.bias"}
    assert all(names[id(p)].endswith("bias") or ".ln" in names[id(p)] for p in no_decay["params"])
    assert "pos_embedding" in {names[id(p)] for p in decay["params"]}
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.24, 0.0)


# ----------------------------------------------------------------------------------------------
# Precision and sharding


@pytest.mark.parametrize(
    ("mode", "compute", "params"),
    [
        ("no", torch.float32, torch.float32),
        ("fp16", torch.float16, torch.float32),
        ("bf16", torch.bfloat16, torch.float32),
        ("pure_fp16", torch.float16, torch.float16),
    ],
)
def test_amp_mode_sets_the_compute_dtype(mode, compute, params):
    prec = run_vit.precision(mode)
    model = tiny().to(prec.model_dtype)
    seen = {}
    model.encoder.block_0.mlp_block.linear_1.register_forward_hook(
        lambda _m, _a, out: seen.update(dtype=out.dtype)
    )
    with prec.autocast(torch.device("cpu")):
        model(torch.randn(2, 3, IMG, IMG).to(prec.model_dtype))
    assert seen["dtype"] == compute
    assert {p.dtype for p in model.parameters()} == {params}
    assert prec.loss_scaling == (mode == "fp16")  # GradScaler only where fp16 gradients need it


def test_fsdp_wraps_the_model_keeps_layernorms_fp32_and_steps(process_group):
    from torch.distributed.fsdp import FullyShardedDataParallel

    assert process_group == (0, 1) and torch.distributed.get_backend() == "gloo"
    args = train_args(sharding="fsdp", optimizer_impl="foreach")
    prec = run_vit.precision("bf16")
    torch.manual_seed(0)
    model = tiny(classifier="pooled", layout="batch_second")
    randomize_head(model)
    wrapped = run_vit.wrap_model(model, args, prec, torch.device("cpu"))
    assert isinstance(wrapped, FullyShardedDataParallel)
    units = [m for m in wrapped.modules() if isinstance(m, FullyShardedDataParallel)]
    ln_units = [u for u in units if isinstance(u.module, nn.LayerNorm)]
    assert len(ln_units) == 2 * 2 + 1  # two per block, one final: each its own unit
    assert all(u.mixed_precision.param_dtype is None for u in ln_units)  # LayerNorms compute in fp32
    assert wrapped.mixed_precision.param_dtype == torch.bfloat16  # the rest in bf16
    optimizer = run_vit.build_optimizer(wrapped, args, prec)
    before = [p.detach().clone() for p in wrapped.parameters()]
    seen = {}
    model.encoder.block_0.mlp_block.linear_1.register_forward_hook(
        lambda _m, _a, out: seen.update(dtype=out.dtype)
    )
    with prec.autocast(torch.device("cpu")):
        logits = wrapped(torch.randn(4, 3, IMG, IMG))
    loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    optimizer.step()
    assert seen["dtype"] == torch.bfloat16
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, wrapped.parameters(), strict=True))


def test_ddp_is_the_baseline_wrapper(process_group):
    wrapped = run_vit.wrap_model(
        tiny(), train_args(sharding="ddp"), run_vit.precision("no"), torch.device("cpu")
    )
    assert isinstance(wrapped, nn.parallel.DistributedDataParallel)


# ----------------------------------------------------------------------------------------------
# The recipe and whole runs


def test_every_cell_of_the_recipe_parses_into_the_trainers_arguments():
    from reprokit.plan import cells, recipes

    recipe = recipes.load("vit-speedups")
    for accelerator, scale in (("cpu", "smoke"), ("cuda", "published")):
        expanded = cells.expand(recipe, "vit-speedups", accelerator, scale)
        assert [c.variant for c in expanded][:6] == [
            "baseline",
            "amp",
            "multi-tensor",
            "pooled",
            "batch-second",
            "fsdp",
        ]
        for cell in expanded:
            parsed = run_vit.parse_args(["--output_dir", "x", *cells.to_argv(cell.args)])
            values = {k: v for arguments in parsed for k, v in vars(arguments).items()}
            variant = next(v for v in recipe.variants if v.name == cell.variant)
            for key, value in variant.args.items():
                if key not in (recipe.scales[scale].args or {}):
                    assert values[key] == value, (cell.variant, key)
            # Every rung runs TF32 as the 2022 stack did (torch <= 1.11: on), said by the recipe.
            assert values["tf32"] is True, cell.variant
    assert "compile" not in [c.variant for c in cells.expand(recipe, "vit-speedups", "cpu", "smoke")]


def run_trainer(tmp_path, *extra: str, env: dict | None = None) -> dict:
    """A few steps of the tiny ViT into tmp_path/run: with ``env`` (read as a process starts: NGC's TF32
    override) in a process of its own, else from main in this process, as test_conformance_loop.py runs each
    trainer's one-process loop (run_vit is imported here already; a new process is mostly importing torch).
    `python -m reprokit_trainers.vit` itself is run in test_trainers_package.py."""
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), "--model_name_or_path", "pycls-vit-tiny", "--img_size", str(IMG),
            "--per_device_train_batch_size", "4", "--max_steps", "4", "--logging_steps", "2",
            "--throughput_warmup_steps", "1", "--synthetic_data", "--synthetic_num_train", "32",
            "--synthetic_pool_size", "4", "--synthetic_image_width", "64", "96", "--synthetic_image_height", "64",
            "96", "--dataloader_num_workers", "0", *extra]  # fmt: skip
    if env is None:
        run_vit.main(argv)  # which ends by leaving the 1-rank group it joined
        return {"out": out, "summary": json.loads((out / "summary.json").read_text())}
    result = subprocess.run(
        [sys.executable, *TRAINER, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        # One thread: 2 shared cores thrash with more.
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return {"out": out, "summary": json.loads((out / "summary.json").read_text())}


@pytest.mark.slow
@pytest.mark.parametrize(
    "rung",
    [
        ["--amp", "no", "--optimizer_impl", "loop", "--sharding", "ddp"],
        [
            *["--amp", "fp16", "--optimizer_impl", "foreach", "--classifier", "pooled"],
            *["--layout", "batch_second", "--sharding", "fsdp", "--attention", "sdpa"],
        ],
    ],
    ids=["baseline", "fsdp-top"],
)
def test_a_smoke_run_writes_the_run_directory(tmp_path, rung):
    run = run_trainer(tmp_path, *rung)
    out, summary = run["out"], run["summary"]
    assert summary["status"] == "ok" and summary["unit"] == "img/s"
    assert summary["samples_per_second"] > 0 and summary["steps"] == 4 and summary["world_size"] == 1
    assert summary["global_batch_size"] == 4 and summary["process_group_backend"] == "gloo"
    assert summary["flops_per_sample"] > 0
    if not torch.cuda.is_available():  # no peak for a CPU, so no MFU
        assert summary["device_peak_tflops"] is None and summary["mfu"] is None
    switches = dict(zip(rung[::2], rung[1::2], strict=True))
    for flag, value in switches.items():
        assert str(summary[flag.removeprefix("--")]) == value
    # What the host compares with the cell's asks, and why a synthetic run is not comparable.
    assert summary["torch_compile"] is False and summary["loader"] == "torch"
    assert departures_of_the_run(summary) == [{"reason": "synthetic data", "kind": "throughput"}]
    # The software that ran, read back: the published baseline's 2022 kernels; the top rung's own.
    tf32 = "not used (cpu)" if not torch.cuda.is_available() else summary["software"]["tf32"]
    if rung[1] == "no":
        assert summary["software"] == {
            "attention": "math", "optimizer": "adamw-per-tensor", "mixed_precision": "fp32",
            # One rank's gradients fit DDP's first bucket: one all-reduce once backward is done.
            "ddp": "ddp-after-backward", "tf32": tf32, "data_path": "pycls",
            # pycls's loop: the labels checked and the top-k errors read every step, zero-filled gradients.
            "host_sync": "every-step", "zero_grad": "zeros",
        }  # fmt: skip
    else:
        assert summary["software"]["optimizer"] == "adamw-foreach"
        assert summary["software"]["attention"].startswith("sdpa")
        assert summary["software"]["ddp"] == "fsdp-no_shard"
        assert summary["software"]["mixed_precision"] == "amp-fp16"
    rows = list(csv.DictReader((out / "throughput.csv").open()))
    assert [int(r["step"]) for r in rows] == [2, 4]
    # Where the window went: the loader's wait timed; DDP's all-reduce timed by its reducer even on one rank.
    breakdown = summary["breakdown"]
    assert (
        breakdown["data_wait"] > 0
        and breakdown["compute"] > 0
        and breakdown["counted"] == "steps 2-4, rank 0"
    )
    if switches["--sharding"] == "ddp":
        assert breakdown["communication"] >= 0 and breakdown["communication_timed"].startswith(
            "DDP's reducer timers"
        )
    else:
        assert breakdown["communication"] is None
        assert breakdown["communication_timed"] == "none (one process)"
    assert {r["steps_total"] for r in rows} == {"4"}
    assert all(float(r["samples_per_second"]) > 0 and r["loss"] for r in rows)
    assert list((out / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert list((out / "tensorboard" / "throughput").glob("events.out.tfevents.*"))
    assert json.loads((out / "sysinfo.json").read_text())["started_at"]


@pytest.mark.slow
def test_tf32_off_is_set_over_ngcs_override_and_recorded(tmp_path):
    # NGC images export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which would turn TF32 on for cuBLAS
    # whatever the trainer says: --tf32 false must win, and say so in sysinfo.json and summary.json.
    run = run_trainer(
        tmp_path, "--max_steps", "2", "--tf32", "false", env={"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    )
    sysinfo = json.loads((run["out"] / "sysinfo.json").read_text())
    for recorded in (sysinfo["precision"], run["summary"]["precision"]):
        assert recorded["tf32_matmul"] is False and recorded["tf32_cudnn"] is False
        assert recorded["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "0"
        assert recorded["float32_matmul_precision"] == "highest"
    assert run["summary"]["tf32"] is False


def refused(tmp_path, *bad: str) -> subprocess.CompletedProcess:
    """The trainer run with a bad argument into tmp_path/x; it must exit non-zero."""
    result = subprocess.run(
        [sys.executable, *TRAINER, "--output_dir", str(tmp_path / "x"), *bad],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    return result


def test_an_out_of_range_argument_is_one_line_and_no_run(tmp_path, capsys):
    """The same schema the host checks a recipe with (test_arguments.py), checked by the trainer itself
    (in this process: the trainer's exit, one line; the process test of a refusal is the next one)."""
    with pytest.raises(SystemExit) as raised:
        run_vit.main(["--output_dir", str(tmp_path / "x"), "--per_device_train_batch_size", "0"])
    assert raised.value.code == "run_vit.py: error: --per_device_train_batch_size: must be at least 1, got 0"
    assert "error" not in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "override, said",
    [
        ('{"n_layers": 0}', "n_layers 0: give a whole number of at least 1"),
        ('{"n_heads": 0}', "n_heads 0: give a whole number of at least 1"),
        ('{"hidden_d": "16"}', "hidden_d '16': give a whole number of at least 1"),
    ],
)
def test_an_architecture_override_of_no_size_is_one_line_and_no_run(tmp_path, override, said):
    """A zero or a text among --model_config_json's sizes (a block_0 missing, a division by zero, before)."""
    with pytest.raises(SystemExit) as raised:
        run_vit.main(
            ["--output_dir", str(tmp_path / "x"), "--model_name_or_path", "pycls-vit-tiny", "--img_size", str(IMG),
             "--synthetic_data", "--max_steps", "2", "--throughput_warmup_steps", "1", "--dataloader_num_workers", "0",
             "--model_config_json", override]
        )  # fmt: skip
    assert raised.value.code == f"run_vit.py: error: {said}"
    assert not (tmp_path / "x" / "summary.json").exists()


def test_a_bad_switch_is_one_line_and_no_run(tmp_path):
    result = refused(tmp_path, "--amp", "fp8")
    assert result.stderr == "run_vit.py: error: --amp: must be one of no, fp16, bf16, pure_fp16; got 'fp8'\n"
    assert not (tmp_path / "x" / "summary.json").exists()


def test_a_class_folder_without_an_image_stops_the_trainer_in_one_line_without_a_preflight(
    tmp_path, process_group
):
    from tests.fakes import tiny_imagenet

    root = tiny_imagenet(tmp_path / "imagenet")
    (root / "train" / "n09999999").mkdir()
    with pytest.raises(SystemExit) as stopped:
        run_vit.main(
            ["--output_dir", str(tmp_path / "run"), "--model_name_or_path", "pycls-vit-tiny", "--img_size", str(IMG),
             "--data_dir", str(root), "--per_device_train_batch_size", "2", "--max_steps", "2",
             "--throughput_warmup_steps", "1", "--dataloader_num_workers", "0"]
        )  # fmt: skip
    assert stopped.value.code == (
        f"run_vit.py: error: 1 of the 3 class folders of {root / 'train'} holds no image (.jpeg, .jpg, .png): "
        f"{root / 'train' / 'n09999999'}; every class given is trained on: add its images or remove the folder"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "data, reason",
    [(b"\x89PNG torn", "OpenCV could not decode an image"), (b"", "an empty file (0 bytes)")],
    ids=["torn", "0-byte"],
)
def test_a_bad_image_in_pyclss_opencv_path_is_named_by_its_path(tmp_path, data, reason):
    from reprokit_trainers.common.data import imagenet
    from reprokit_trainers.vit import pycls_data
    from tests.fakes import tiny_imagenet

    root = tiny_imagenet(tmp_path / "imagenet")
    bad = root / "train" / "n01443537" / "n01443537_2.JPEG"
    bad.write_bytes(data)
    source = imagenet.ImageFolderSource(root)
    dataset = pycls_data.train_dataset("pycls", source, 32, "AutoAugment")
    index = [i for i in range(len(source)) if source.describe(i) == str(bad)][0]
    with pytest.raises(imagenet.BadImage, match=f"^bad image {bad}: {re.escape(reason)}"):
        dataset[index]


@pytest.mark.parametrize("pipeline", ["pycls", "uint8"])
def test_a_0_byte_jpeg_without_a_preflight_stops_the_trainer_in_one_line_naming_it(tmp_path, pipeline):
    """What a copy cut short leaves, met by the trainer itself in a loader worker, on either data path."""
    from tests.fakes import tiny_imagenet

    root = tiny_imagenet(tmp_path / "imagenet")
    # Eight images in all, the bad one among them: two steps of four read each once.
    folder = root / "train" / "n01440764"
    for k in range(2, 7):
        (folder / f"n01440764_{k}.JPEG").write_bytes((folder / "n01440764_1.JPEG").read_bytes())
    bad = root / "train" / "n01443537" / "n01443537_0.JPEG"
    bad.write_bytes(b"")
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, *TRAINER, "--output_dir", str(out), "--model_name_or_path", "pycls-vit-tiny",
         "--img_size", str(IMG), "--per_device_train_batch_size", "4", "--max_steps", "2", "--logging_steps", "1",
         "--throughput_warmup_steps", "1", "--data_dir", str(root), "--dataloader_num_workers", "1",
         "--input_pipeline", pipeline],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"run_vit.py: error: bad image {bad}: "), result.stderr[-2000:]
    assert last.endswith("; remove or replace the file")
    assert "cv2.error" not in result.stderr and not (out / "summary.json").exists()
