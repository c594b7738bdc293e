"""The published training loops against the loops their publications ran: what each step makes a
GPU wait for. The golden sequences were recorded from the upstream loops themselves, run on the CPU
for a few steps at the pinned commits (sail-sg/volo's main.py train_one_epoch with the toolbox's
prefetcher, pycls's train_epoch, transformers 4.31's Trainer.train), by the same recorder that
records the kit's here (tests/conformance/looprecord.py; the generators name the commands). Each
trainer's published cell, at the smoke scale, runs four steps in one process and in two (gloo), and
its steady steps, one that logs and one that does not, must hold the same host-device syncs, loop
collectives, zero_grad semantics, input-stream work and backward hooks as upstream's; the kit's meter
may add nothing but a synchronize where the loop has just synchronized (a wait that costs nothing).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("timm")
pytest.importorskip("transformers")

from tests import conformance  # noqa: E402
from tests.conformance import looprecord  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning"),
]

# Each trainer's golden loop (its publication's recipes/<name>/conformance/<trainer>_golden.json, found,
# never listed), and the recipe and published variant whose loop is held to it (the fixture names it).
# A fixture that records no loop (image classification's holds the example's data path and model, not
# yet its Trainer loop) has nothing to hold here; the one test below names each, so that none is missed.
NO_LOOP_YET = {"image_classification"}
FIXTURES = {trainer: json.loads(path.read_text()) for trainer, path in conformance.goldens().items()}
PUBLISHED = {
    trainer: (conformance.goldens()[trainer].parent.parent.name, fixture["loop"]["variant"])
    for trainer, fixture in FIXTURES.items()
    if "loop" in fixture
}
STEPS, LOGGING = 4, 2
# The kit's measurement, not its loop: what these modules do is the meter's.
METER = (
    "reprokit_trainers.common.record.rundir",
    "reprokit_trainers.common.measure.meter",
    "reprokit_trainers.common.measure.steps",
    "reprokit_trainers.common.measure.breakdown",
    "reprokit_trainers.common.measure.energy",
    "reprokit_trainers.common.measure.profiling",
    "reprokit_trainers.common.measure.hf_trainer",
)


def golden(trainer: str) -> dict[str, Any]:
    return conformance.golden(trainer)["loop"]


def published_argv(trainer: str, output_dir: str, **overrides: Any) -> list[str]:
    """The published variant's smoke cell, four steps, logging every second, no loader workers."""
    from reprokit.plan import cells, recipes

    recipe, variant = PUBLISHED[trainer]
    cell = cells.expand(recipes.load(recipe), recipe, "cpu", "smoke", [variant])[0]
    args = {**cell.args, "max_steps": STEPS, "logging_steps": LOGGING, "throughput_warmup_steps": 1}
    args.update(dataloader_num_workers=0, output_dir=output_dir, **overrides)
    return cells.to_argv({k: v for k, v in args.items() if v is not None})


@contextlib.contextmanager
def kit_recording(recorder: looprecord.Recorder) -> Iterator[None]:
    """The recorder over a kit trainer: a fetch through the step logger (or the Trainer's loader)
    opens a step; the kit's waits and side stream (common/process/streams.py), which on the CPU do their
    work inline, are noted where the loop calls them."""
    from accelerate.data_loader import DataLoaderShard

    from reprokit_trainers.common.measure.steps import StepLogger
    from reprokit_trainers.common.process import streams

    batches = StepLogger.batches

    def fetched(self: StepLogger, loader: Any) -> Iterator[Any]:
        return looprecord.fetching(recorder, iter(batches(self, loader)))

    def enter(side: streams.SideStream) -> streams.SideStream:
        side._recorded = recorder.on_stream(looprecord._FakeStream(recorder, "side"))
        side._recorded.__enter__()
        return side

    def leave(side: streams.SideStream, *exc: object) -> None:
        side._recorded.__exit__(*exc)

    with contextlib.ExitStack() as stack:
        patch = lambda owner, name, value: looprecord._patch(stack, owner, name, value)  # noqa: E731
        patch(StepLogger, "batches", fetched)
        patch(streams, "synchronize", lambda device=None: recorder.note("sync:synchronize"))
        patch(streams.SideStream, "__enter__", enter)
        patch(streams.SideStream, "__exit__", leave)
        patch(streams.SideStream, "wait", lambda side: recorder.note("stream:default waits for side"))
        stack.enter_context(recorder.recording())
        stack.enter_context(recorder.fetches(DataLoaderShard))
        yield


def kit_rank(rank: int, world: int, trainer: str, argv: list[str]) -> dict[str, Any]:
    """One rank of a kit trainer's main(), recorded: the loop's sequences and the meter's events."""
    import importlib

    main = importlib.import_module(f"reprokit_trainers.{trainer}.run_{trainer}").main
    recorder = looprecord.Recorder(meter=METER, carriers=(__name__,))
    with kit_recording(recorder):
        main(argv)

    def logged(step: int) -> bool:
        return step % LOGGING == 0 or step == STEPS

    found = looprecord.sequences(recorder, logged, STEPS)
    meter: dict[str, list[str]] = {}
    for event in recorder.events:
        if event.role == "meter" and 1 < event.step < STEPS:
            meter.setdefault("logging_step" if logged(event.step) else "step", []).append(event.what)
        if event.role == "meter" and event.what.startswith("hook:"):
            found["backward_hooks"] = sorted(
                {*found["backward_hooks"], f"{event.what} (meter: {event.where})"}
            )
    found["meter"] = meter
    return found


def record_kit(trainer: str, world: int, **overrides: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        argv = published_argv(trainer, str(Path(scratch) / "run"), **overrides)
        return looprecord.in_ranks(world, kit_rank, trainer, argv, env=True)


def kit_ranks(rank: int, world: int, runs: list[tuple[str, list[str]]]) -> dict[str, dict[str, Any]]:
    """One rank of each trainer's main() in turn, recorded (each leaves the group it joined). Each
    joins its group at a port of its own: after BridgeTower's Trainer run, a later trainer's group at
    the same port never formed (its two ranks waited, idle, until killed after 11 minutes)."""
    import os

    first = int(os.environ["MASTER_PORT"])
    found = {}
    for index, (trainer, argv) in enumerate(runs):
        os.environ["MASTER_PORT"] = str(first + index)
        found[trainer] = kit_rank(rank, world, trainer, argv)
    return found


@pytest.fixture(scope="module")
def two_ranks() -> dict[str, dict[str, Any]]:
    """Each trainer's published loop in the same two ranks, one after another: a rank is a new Python
    that imports torch, timm and transformers (seconds each), started once for the three trainers."""
    with tempfile.TemporaryDirectory() as scratch:
        runs = [(trainer, published_argv(trainer, str(Path(scratch) / trainer))) for trainer in PUBLISHED]
        return looprecord.in_ranks(2, kit_ranks, runs, env=True)


def held_to_upstream(kit: dict[str, Any], upstream: dict[str, Any]) -> None:
    """The loop's own events of each steady step equal upstream's, the backward hooks too; the meter
    adds only a synchronize after a loop's sync in a step that logs."""
    assert kit["backward_hooks"] == upstream["backward_hooks"], "hooks on the backward pass"
    for kind in ("step", "logging_step"):
        assert kit[kind] == upstream[kind], (
            f"{kind}: the kit's loop {list(zip(kit[kind], kit[f'{kind}_where'], strict=True))}, "
            f"upstream's {list(zip(upstream[kind], upstream[f'{kind}_where'], strict=True))}"
        )
    assert not kit["meter"].get("step"), f"the meter in a step that does not log: {kit['meter']['step']}"
    extra = set(kit["meter"].get("logging_step", [])) - {"sync:synchronize"}
    assert not extra, f"the meter in a step that logs: {sorted(extra)}"
    if kit["meter"].get("logging_step"):
        assert any(e.startswith("sync:") for e in kit["logging_step"]), (
            "the meter synchronizes in a step whose loop never waited: that wait would be the meter's cost"
        )


def test_every_golden_fixture_records_its_loop_but_the_ones_known_not_to_yet():
    assert set(FIXTURES) - set(PUBLISHED) == NO_LOOP_YET


@pytest.mark.parametrize("trainer", sorted(PUBLISHED))
def test_a_published_loop_waits_reduces_and_zeroes_as_upstreams_did_alone(trainer):
    held_to_upstream(record_kit(trainer, 1), golden(trainer)["worlds"]["1"])


@pytest.mark.parametrize("trainer", sorted(PUBLISHED))
def test_a_published_loop_waits_reduces_and_zeroes_as_upstreams_did_in_two_ranks(trainer, two_ranks):
    held_to_upstream(two_ranks[trainer], golden(trainer)["worlds"]["2"])


@pytest.mark.parametrize(
    ("trainer", "change"),
    [
        ("volo", {"host_sync": "logging_steps"}),
        ("volo", {"zero_grad": "set_to_none"}),
        ("volo", {"prefetch": "inline"}),
        ("vit", {"host_sync": "logging_steps"}),
        ("vit", {"zero_grad": "set_to_none"}),
        ("bridgetower", {"logging_nan_inf_filter": False}),
    ],
)
def test_a_changed_sync_zero_grad_or_stream_fails_the_comparison(trainer, change):
    """Today's cheaper forms (the beyond variants' switches) are departures the suite catches."""
    with pytest.raises(AssertionError):
        held_to_upstream(record_kit(trainer, 1, **change), golden(trainer)["worlds"]["1"])


def test_a_meter_that_hooks_the_backward_pass_fails_the_comparison(monkeypatch):
    """A per-bucket communication hook (what the breakdown used to time the all-reduce with) is a
    hook on the backward pass the published loop never had."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from reprokit_trainers.common.measure.breakdown import Breakdown

    watch = Breakdown.watch

    def hooked(self, model, every_step=False):
        watch(self, model, every_step)
        model.register_comm_hook(None, allreduce_hook)

    monkeypatch.setattr(Breakdown, "watch", hooked)
    with pytest.raises(AssertionError, match="hooks on the backward pass"):
        held_to_upstream(record_kit("volo", 1), golden("volo")["worlds"]["1"])
