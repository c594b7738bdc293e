"""The input path's side stream and the prefetcher: the toolbox's order (batch k+1 made ready while
step k runs), a real CUDA stream on a GPU and the same calls inline on a CPU, said as such."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reprokit_trainers.common.data import prefetch  # noqa: E402
from reprokit_trainers.common.process import streams  # noqa: E402


class FakeCuda:
    """torch.cuda's stream calls, noted: what a GPU run would do, checked without one."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[str] = []
        cuda = self

        class Stream:
            def __init__(self, device=None) -> None:
                cuda.calls.append("new side stream")

            def wait_stream(self, other) -> None:
                cuda.calls.append("compute waits for side")

        class Context:
            def __init__(self, stream) -> None:
                self.stream = stream

            def __enter__(self):
                cuda.calls.append("enter side")

            def __exit__(self, *exc):
                cuda.calls.append("leave side")

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", Context)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream.__new__(Stream))
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: cuda.calls.append("synchronize"))


def test_on_a_gpu_the_next_batch_is_made_ready_on_the_side_stream_while_the_step_runs(monkeypatch):
    cuda = FakeCuda(monkeypatch)

    def ready(batch: int) -> int:
        cuda.calls.append(f"prepare {batch}")
        return batch

    loader = prefetch.Prefetcher([1, 2, 3], torch.device("cuda", 0), ready)
    taken = []
    for batch in loader:
        cuda.calls.append(f"step {batch}")
        taken.append(batch)
    assert taken == [1, 2, 3] and loader.ran == "side-stream"
    assert cuda.calls == [
        "new side stream",
        "enter side", "prepare 1", "leave side", "compute waits for side",
        "enter side", "prepare 2", "leave side", "step 1",  # batch 2 is on its way while step 1 runs
        "compute waits for side", "enter side", "prepare 3", "leave side", "step 2",
        "compute waits for side", "step 3",
    ]  # fmt: skip


def test_on_a_cpu_the_same_calls_run_inline_and_say_so():
    calls = []
    loader = prefetch.Prefetcher([1, 2], torch.device("cpu"), lambda batch: calls.append(batch) or batch)
    assert list(loader) == [1, 2] and calls == [1, 2]
    assert loader.ran == "inline (cpu: no side stream)"


def test_the_inline_form_prepares_each_batch_when_taken_on_the_compute_stream(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    loader = prefetch.Prefetcher(
        [1, 2], torch.device("cuda", 0), lambda b: cuda.calls.append(f"prepare {b}") or b, "inline"
    )
    for batch in loader:
        cuda.calls.append(f"step {batch}")
    assert cuda.calls == ["prepare 1", "step 1", "prepare 2", "step 2"] and loader.ran == "inline"


def test_a_loop_that_does_not_wait_every_step_hands_each_batch_to_the_compute_stream(monkeypatch):
    FakeCuda(monkeypatch)
    handed = []
    monkeypatch.setattr(streams.SideStream, "hand_over", lambda side, tensors: handed.append(list(tensors)))
    batches = [{"pixel_values": 1}, {"pixel_values": 2}]
    list(prefetch.Prefetcher(batches, torch.device("cuda", 0), lambda b: b, hand_over=True))
    assert handed == [[1], [2]]
    handed.clear()
    list(prefetch.Prefetcher(batches, torch.device("cuda", 0), lambda b: b))
    assert handed == []  # the toolbox's prefetcher, under a loop that synchronizes every step


def test_synchronize_waits_for_the_device_it_is_given_and_nothing_on_a_cpu(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    streams.synchronize(torch.device("cpu"))
    assert cuda.calls == []
    streams.synchronize(torch.device("cuda", 0))
    assert cuda.calls == ["synchronize"]


def test_an_unknown_prefetch_mode_is_one_line_naming_the_flag():
    with pytest.raises(ValueError, match="--prefetch overlapped: choose one of side_stream, inline"):
        prefetch.Prefetcher([], torch.device("cpu"), lambda b: b, "overlapped")
