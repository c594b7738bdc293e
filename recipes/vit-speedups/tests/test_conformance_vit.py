"""The ViT ladder's trainer against facebookresearch/pycls itself: golden values made by pycls's own code
at pinned commits (recipes/vit-speedups/conformance/make_vit_golden.py; the fixture names the commits and the command),
compared with no network. A published rung must compute what pycls computed: the model in each
classifier and layout, the loss, the parameter groups, the multi-tensor AdamW step, the learning rate
per epoch, the data path; and it must dispatch the attention kernels pycls ran in 2022."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cv2")

from reprokit_trainers.common.record import software  # noqa: E402
from reprokit_trainers.vit import model as vit_model  # noqa: E402
from reprokit_trainers.vit import pycls_data, run_vit  # noqa: E402
from tests.conformance.weights import canonical, deterministic_, images  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "conformance" / "vit_golden.json").read_text())
CONFIG = GOLDEN["config"]
CASES = [(layout, classifier) for layout in GOLDEN["layouts"] for classifier in ("token", "pooled")]


def kit_model(layout: str, classifier: str, attention: str = "math") -> vit_model.ViT:
    vit = CONFIG["vit"]
    overrides = {
        "image_size": CONFIG["im_size"],
        "num_classes": CONFIG["num_classes"],
        "patch_size": vit["PATCH_SIZE"],
        "n_layers": vit["NUM_LAYERS"],
        "n_heads": vit["NUM_HEADS"],
        "hidden_d": vit["HIDDEN_DIM"],
        "mlp_d": vit["MLP_DIM"],
    }
    model = vit_model.build_vit("tiny", overrides, classifier=classifier, layout=layout, attention=attention)
    deterministic_(dict(model.named_parameters()))
    return model


def check_model(layout: str, classifier: str, label_smoothing: float = 0.1) -> None:
    """The kit's forward, loss, gradients, parameter groups and one multi-tensor AdamW step against
    pycls's (AssertionError on the first difference)."""
    golden = GOLDEN["layouts"][layout]["models"][classifier]
    model = kit_model(layout, classifier)
    logits = model(images(CONFIG["im_size"]))
    torch.testing.assert_close(
        logits.detach().flatten(), torch.tensor(golden["logits"]), rtol=1e-5, atol=1e-6
    )
    loss = run_vit.pycls_loss(logits, torch.tensor(CONFIG["labels"]), label_smoothing)
    assert loss.item() == pytest.approx(golden["loss"], rel=1e-5)
    loss.backward()
    named = {canonical(n): p for n, p in model.named_parameters()}
    assert set(named) == set(golden["grad_norm"])
    for name, param in named.items():
        assert param.grad.norm().item() == pytest.approx(golden["grad_norm"][name], rel=1e-4, abs=1e-7), name
    groups = run_vit.param_groups(model, CONFIG["optim"]["WEIGHT_DECAY"])
    decay = {
        canonical(n): g["weight_decay"]
        for g in groups
        for n, p in model.named_parameters()
        for q in g["params"]
        if p is q
    }
    assert decay == golden["weight_decay"]
    args = run_vit.TrainArguments(output_dir="unused", optimizer_impl="foreach")
    optimizer = run_vit.build_optimizer(model, args, run_vit.precision("no"))
    assert software.optimizer(optimizer) == "adamw-foreach"  # pycls's OPTIM.MTA
    for group in optimizer.param_groups:
        group["lr"] = run_vit.pycls_lr(0, args)
    optimizer.step()
    for name, param in named.items():
        assert param.detach().norm().item() == pytest.approx(golden["norm_after_step"][name], rel=1e-5), name


@pytest.mark.parametrize("layout, classifier", CASES)
def test_the_model_loss_groups_and_optimizer_step_are_pyclss(layout, classifier):
    check_model(layout, classifier)


def test_the_learning_rate_per_epoch_is_pyclss():
    args = run_vit.TrainArguments(output_dir="unused")
    assert (args.learning_rate, args.min_lr, args.epochs, args.warmup_epochs, args.weight_decay) == (
        CONFIG["optim"]["BASE_LR"], CONFIG["optim"]["MIN_LR"], CONFIG["optim"]["MAX_EPOCH"],
        CONFIG["optim"]["WARMUP_EPOCHS"], CONFIG["optim"]["WEIGHT_DECAY"],
    )  # fmt: skip
    kit = [run_vit.pycls_lr(epoch, args) for epoch in range(len(GOLDEN["lr_per_epoch"]))]
    assert kit == pytest.approx(GOLDEN["lr_per_epoch"], rel=1e-12)


def check_data(transform: pycls_data.PyclsTrainTransform) -> None:
    for data, golden in zip(GOLDEN["jpegs"], GOLDEN["data"], strict=True):
        np.random.seed(golden["seed"])
        out = transform(pycls_data.decode_bgr(base64.b64decode(data)))
        assert list(out.shape) == golden["shape"] and str(out.numpy().dtype) == golden["dtype"]
        torch.testing.assert_close(out.flatten(), torch.tensor(golden["values"]), rtol=0, atol=2e-6)


def test_the_published_data_path_is_pyclss_on_the_same_jpegs():
    """OpenCV decode, float32 crop and resize, flip, lighting, normalize, BGR CHW: the same draws from
    numpy's generator, the same values (AutoAugment off: pycls's own draws with Python's random)."""
    check_data(pycls_data.PyclsTrainTransform(CONFIG["data_size"], augment="none"))


def test_a_published_rung_dispatches_the_unfused_attention_pycls_ran_and_sdpa_goes_beyond():
    """torch 1.x ran pycls's nn.MultiheadAttention(need_weights=False) as bmm, softmax, bmm; torch 2
    sends the same call to fused SDPA. The published rungs ask for the unfused path and get it; the
    beyond variants' kernels differ, which is what their speedup measures."""
    seen = {}
    for attention in ("math", "mha", "sdpa"):
        model = kit_model("batch_second", "pooled", attention)
        seen[attention] = run_vit.attention_in_effect(model, run_vit.precision("no"), torch.device("cpu"))
    assert seen["math"] == "math"
    assert seen["mha"].startswith("sdpa-") and seen["sdpa"].startswith("sdpa-")


def test_a_changed_published_semantic_fails_the_comparison():
    """The suite catches a departure: pycls's label smoothing dropped, its lighting noise dropped, or
    its BGR channel order turned to RGB each fail against pycls's values."""
    with pytest.raises(AssertionError):
        check_model("batch_second", "pooled", label_smoothing=0.0)
    with pytest.raises(AssertionError):
        check_data(pycls_data.PyclsTrainTransform(CONFIG["data_size"], augment="none", pca_std=0.0))

    class Rgb(pycls_data.PyclsTrainTransform):
        def __call__(self, bgr):
            return super().__call__(bgr).flip(0)

    with pytest.raises(AssertionError):
        check_data(Rgb(CONFIG["data_size"], augment="none"))


def test_the_fixture_says_which_upstream_commits_and_command_made_it():
    assert GOLDEN["upstream"] == {
        "repository": "facebookresearch/pycls",
        "commits": {
            "batch_first": "526685d4608a5b8455277f6e9d70d8a86029b041",
            "batch_second": "5719de641657c251f807c20a1fcf8ef6f4b60144",
        },
    }
    assert GOLDEN["command"].startswith("python recipes/vit-speedups/conformance/make_vit_golden.py --pycls ")
    assert GOLDEN["made_with"]["torch"] and GOLDEN["made_with"]["numpy"]
