"""The kit's VOLO trainer against the publication's own code, number for number.

recipes/volo/conformance/volo_golden.json holds what sail-sg/volo (main.py, its model and loss), the
token-labeling toolbox and timm 0.4.5 computed on the fixed inputs of volo_inputs.py, at the
commits it records (recipes/volo/conformance/make_volo_golden.py made it; rerun it to remake it). These
tests feed the same inputs to the kit's trainer, with no network and no upstream code: the token
targets, the model's outputs and gradients, the loss, the schedule, AdamW's groups and steps.
Each published behaviour is also changed once, to show the comparison catches it; the kernels
beyond the publication are shown to compute the same numbers, so their speedups are the kernels'.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from reprokit_trainers.common.record import software  # noqa: E402
from reprokit_trainers.volo import attention, run_volo, tokenlabel  # noqa: E402
from tests import conformance  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

FIXTURE = Path(__file__).resolve().parents[1] / "conformance" / "volo_golden.json"
# The fixed inputs the generator fed the upstream code, beside the fixture.
inputs = conformance.module(FIXTURE.parent / "volo_inputs.py")
GOLDEN = json.loads(FIXTURE.read_text())


def worst(kit: torch.Tensor, golden: list) -> float:
    """The largest absolute difference between the kit's values and the golden ones."""
    return (kit.detach().float() - torch.tensor(golden)).abs().max().item()


def relative(kit: dict[str, float], golden: dict[str, float]) -> float:
    """The largest relative difference between two name -> value tables over the same names."""
    assert kit.keys() == golden.keys()
    return max(abs(kit[k] - golden[k]) / max(abs(golden[k]), 1e-12) for k in golden)


def test_the_fixture_says_which_upstream_commits_and_command_made_it():
    made_by = GOLDEN["made_by"]
    assert {u["repository"]: u["commit"] for u in made_by["upstream"]} == {
        "sail-sg/volo": "cf35775276a887ccd749ad82c3ba0ac034020cc9",
        "zihangJiang/TokenLabeling": "9dbfd59aedecfe83f6f3253db4e99b82359d48ac",
    }
    assert made_by["command"].startswith("python recipes/volo/conformance/make_volo_golden.py --volo ")
    assert made_by["packages"]["timm"] == "0.4.5"  # what both upstream repositories pin
    assert FIXTURE.stat().st_size < 64 * 1024


# ----------------------------------------------------------------------------------------------
# Token-label targets


def kit_targets(**choices: str) -> tokenlabel.TokenTargets:
    """The kit's targets for the golden crops: maps unflipped, the flip given beside them."""
    return tokenlabel.build_token_targets(
        inputs.label_maps(),
        inputs.boxes(),
        torch.tensor(inputs.FLIPPED),
        torch.tensor(inputs.LABELS),
        inputs.NUM_CLASSES,
        inputs.LABEL_SIZE,
        inputs.SMOOTHING,
        **choices,
    )


def targets_gap(targets: tokenlabel.TokenTargets) -> float:
    golden = GOLDEN["token_targets"]
    return max(
        worst(targets.gt, golden["gt"]),
        worst(targets.cls, golden["cls"]),
        worst(targets.dense, golden["dense"]),
    )


def test_token_label_targets_are_the_toolboxs():
    assert targets_gap(kit_targets()) < 1e-6


@pytest.mark.parametrize(
    "choice, at_least",
    [
        # The geometric box moves every token's target on these non-square crops.
        ({"box": "corrected"}, 0.05),
        # p (1 - s) + s/C instead of p (1 - s + s/C) + s/C: p s/C apart, up to 0.01 with 10 classes.
        ({"smoothing_form": "convex"}, 1e-3),
    ],
)
def test_a_changed_token_label_semantic_fails_the_comparison(choice, at_least):
    assert targets_gap(kit_targets(**choice)) > at_least


# ----------------------------------------------------------------------------------------------
# The model, MixToken and the loss


def kit_model(kernel: str = "math") -> torch.nn.Module:
    args = run_volo.ModelArguments(
        model_name_or_path="volo_d1",
        model_kwargs_json=json.dumps(inputs.ARCHITECTURE),
        num_classes=inputs.NUM_CLASSES,
        attention=kernel,
    )
    model, _ = run_volo.build_model(args, inputs.IMG_SIZE)
    inputs.fill_weights(model.state_dict(keep_vars=True).items())
    return model


def kit_forward(monkeypatch, model: torch.nn.Module, box: list[int]) -> tuple:
    """The kit's training forward with MixToken given sail-sg/volo's box (it draws the box from
    numpy's global state; the kit from a generator of its own)."""
    monkeypatch.setattr(tokenlabel, "sample_token_box", lambda *args, **kwargs: tuple(box))
    return tokenlabel.MixTokenForward(model, mix_token=True, seed=0).train()(inputs.images())


def test_the_models_outputs_loss_and_gradients_are_sail_sg_volos(monkeypatch):
    golden = GOLDEN["model"]
    model = kit_model()
    # sail-sg/volo's (bbx1, bby1, bbx2, bby2) run along (H, W): the kit's (top, left, bottom, right).
    cls_logits, token_logits, box = kit_forward(monkeypatch, model, golden["mix_box"])
    assert worst(cls_logits, golden["cls_logits"]) < 1e-5
    assert worst(token_logits, golden["token_logits"]) < 1e-5
    targets = kit_targets()
    batch = tokenlabel.TokenTargets(*(t[: inputs.BATCH] for t in (targets.gt, targets.cls, targets.dense)))
    loss = tokenlabel.TokenLabelLoss(dense_weight=0.5, cls_weight=1.0)(cls_logits, token_logits, box, batch)
    assert loss.item() == pytest.approx(golden["loss"], rel=1e-6)
    with_gt = tokenlabel.TokenLabelLoss(0.5, 1.0, ground_truth=True)(cls_logits, token_logits, box, batch)
    assert with_gt.item() == pytest.approx(golden["loss_ground_truth"], rel=1e-6)
    loss.backward()
    norms = {name: p.grad.norm().item() for name, p in model.named_parameters()}
    assert relative(norms, golden["grad_norms"]) < 1e-4
    assert attention.attention_ran(model) == "math"


def test_a_mixtoken_box_on_the_wrong_axes_fails_the_comparison(monkeypatch):
    top, left, bottom, right = GOLDEN["model"]["mix_box"]
    cls_logits, token_logits, _ = kit_forward(monkeypatch, kit_model(), [left, top, right, bottom])
    assert worst(token_logits, GOLDEN["model"]["token_logits"]) > 1e-3


def test_fused_attention_beyond_the_publication_computes_the_same_outputs(monkeypatch):
    model = kit_model("sdpa")
    cls_logits, token_logits, _ = kit_forward(monkeypatch, model, GOLDEN["model"]["mix_box"])
    assert worst(cls_logits, GOLDEN["model"]["cls_logits"]) < 1e-4
    assert worst(token_logits, GOLDEN["model"]["token_logits"]) < 1e-4
    # The same numbers from another kernel, and summary.json says which one ran.
    assert attention.attention_ran(model).startswith("sdpa")


# ----------------------------------------------------------------------------------------------
# Schedule and optimizer


@pytest.mark.parametrize("recipe", sorted(inputs.SCHEDULES))
def test_the_learning_rate_per_epoch_is_main_pys(recipe):
    golden = GOLDEN["schedules"][recipe]
    train_args = run_volo.TrainArguments(output_dir="unused", **inputs.SCHEDULES[recipe])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=train_args.lr)
    scheduler, epochs = run_volo.build_scheduler(optimizer, train_args)
    assert epochs == golden["epochs"]
    lrs = []
    for epoch in range(epochs):  # stepped once per epoch, as main.py and the kit's loop step it
        lrs.append(optimizer.param_groups[0]["lr"])
        scheduler.step(epoch + 1)
    assert lrs == pytest.approx(golden["lr_per_epoch"], rel=1e-6)


def kit_optimizer(model: torch.nn.Module, impl: str = "per_tensor") -> torch.optim.Optimizer:
    train_args = run_volo.TrainArguments(
        output_dir="unused", weight_decay=inputs.OPTIMIZER["weight_decay"], optimizer_impl=impl
    )
    return run_volo.build_optimizer(model, train_args, inputs.OPTIMIZER["lr"])


def update_norms(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, list[float]]:
    """Each parameter's update over the golden number of steps, with the golden gradients."""
    found: dict[str, list[float]] = {name: [] for name, _ in model.named_parameters()}
    for _ in range(inputs.OPTIMIZER["steps"]):
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        inputs.fill_gradients(model.named_parameters())
        optimizer.step()
        for name, p in model.named_parameters():
            found[name].append((p.detach() - before[name]).norm().item())
    return found


def updates_gap(found: dict[str, list[float]]) -> float:
    golden = GOLDEN["optimizer"]["update_norms"]
    return max(
        relative({n: v[i] for n, v in found.items()}, {n: v[i] for n, v in golden.items()}) for i in range(2)
    )


def test_adamw_its_groups_and_its_steps_are_timm_0_4s():
    golden = GOLDEN["optimizer"]
    model = kit_model()
    optimizer = kit_optimizer(model)
    assert f"{type(optimizer).__module__}.{type(optimizer).__name__}" == golden["class"]
    for key in ("lr", "eps", "amsgrad"):
        assert optimizer.defaults[key] == golden["defaults"][key]
    assert list(optimizer.defaults["betas"]) == golden["defaults"]["betas"]
    names = {id(p): name for name, p in model.named_parameters()}
    groups = [
        {"weight_decay": g["weight_decay"], "params": [names[id(p)] for p in g["params"]]}
        for g in optimizer.param_groups
    ]
    assert groups == golden["groups"]  # no decay on biases, norms, pos_embed, cls_token
    # The kernels of torch <= 1.10's AdamW (a loop over the tensors), asked for and read back.
    assert software.optimizer(optimizer) == "adamw-per-tensor"
    assert updates_gap(update_norms(model, optimizer)) < 1e-5


def test_weight_decay_on_every_parameter_fails_the_comparison():
    from timm.optim import create_optimizer_v2

    model = kit_model()
    optimizer = create_optimizer_v2(
        model, opt="adamw", lr=inputs.OPTIMIZER["lr"], weight_decay=0.05, filter_bias_and_bn=False
    )
    assert updates_gap(update_norms(model, optimizer)) > 1e-3


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adamw_kernels_beyond_the_publication_make_the_same_updates(impl):
    model = kit_model()
    optimizer = kit_optimizer(model, impl)
    assert software.optimizer(optimizer) == f"adamw-{impl}"
    assert updates_gap(update_norms(model, optimizer)) < 1e-5
