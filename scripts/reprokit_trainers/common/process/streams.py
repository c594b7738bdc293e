"""Where a training loop makes the host wait for the device, and the input path's own stream.

What a GPU's samples/s comes to depends on these as much as on the model: a loop that synchronizes
every step (sail-sg/volo's main.py calls ``torch.cuda.synchronize()`` after each one) cannot queue
the next step while the device works; one that copies and normalizes the next batch on a side
stream (the token-labeling toolbox's prefetcher, timm's) overlaps that work with the current step.
The published loops do what their publications did, through this module, so that what they wait for
is in one place and the loop-conformance suite (tests/test_conformance_loop.py) sees every call.

On a CPU there is nothing to wait for (an op has finished when it returns) and no side stream: the
same calls run, and do their work inline. ``SideStream.kind`` says which it was.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

SIDE_STREAM = "side-stream"  # summary.json software.input_stream: the copy ran on a stream of its own
INLINE = "inline"  # on the stream the step computes on


def synchronize(device: torch.device | None = None) -> None:
    """Wait until ``device`` (default: this process's accelerator, if it started) has done all its
    queued work: ``torch.cuda.synchronize``, or the HPU's; nothing on a CPU."""
    if device is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        hpu = getattr(torch, "hpu", None)
        if hpu is not None and hpu.is_available():
            hpu.synchronize()
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "hpu":
        torch.hpu.synchronize()


class SideStream:
    """A CUDA stream of the input path's own (``with side:`` runs work on it, ``wait()`` makes the
    compute stream wait for that work); on a device without CUDA streams the work runs inline."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._entered: AbstractContextManager[Any] | None = None

    @property
    def kind(self) -> str:
        """``side-stream`` on a GPU; ``inline (<device>: no side stream)`` elsewhere."""
        return SIDE_STREAM if self.stream is not None else f"{INLINE} ({self.device.type}: no side stream)"

    def __enter__(self) -> SideStream:
        self._entered = torch.cuda.stream(self.stream) if self.stream is not None else nullcontext()
        self._entered.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        entered, self._entered = self._entered, None
        if entered is not None:
            entered.__exit__(*exc)

    def wait(self) -> None:
        """The compute stream waits (on the device, not the host) for the work queued on this one."""
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def hand_over(self, tensors: Any) -> None:
        """Tell the allocator the compute stream uses ``tensors`` (made on this stream), so their
        memory is not reused here before the compute stream is done with it. A loop that waits for
        the device every step needs none (the toolbox's prefetcher calls none)."""
        if self.stream is None:
            return
        current = torch.cuda.current_stream(self.device)
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
                tensor.record_stream(current)
