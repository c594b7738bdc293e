"""Batches made ready for the step on the device: copied, normalized and erased, as the published
loaders did it (the token-labeling toolbox's ``PrefetchLoader``, tlt/data/loader.py; timm's).

``side_stream``: the publication's. While step k runs, batch k+1 is copied (non-blocking), turned
into normalized floats and randomly erased on a stream of its own; when the loop asks for it, the
compute stream waits for that stream (on the device), and batch k+2 is started. On a CPU, with no
streams, the same code runs the work inline (``streams.SideStream``).

``inline``: the batch is made ready on the compute stream when the loop takes it, with no lookahead:
simpler, and what the kit did before; a variant beyond the publication where it proves faster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from reprokit_trainers.common.process import streams

MODES = ("side_stream", "inline")


class Prefetcher:
    """``loader``'s batches after ``prepare`` (the copy to the device and the work on it)."""

    def __init__(
        self,
        loader: Iterable[Any],
        device: torch.device,
        prepare: Callable[[Any], Any],
        mode: str = "side_stream",
        hand_over: bool = False,
    ) -> None:
        """``prepare``: a batch to the device and the work on it; ``hand_over``: the loop does not wait
        for the device every step, so each batch's memory is handed to the compute stream
        (``streams.SideStream.hand_over``) before the side stream could reuse it."""
        if mode not in MODES:
            raise ValueError(f"--prefetch {mode}: choose one of {', '.join(MODES)}")
        self.loader, self.device, self.prepare, self.mode = loader, device, prepare, mode
        self.hand_over = hand_over
        self.ran: str | None = None  # summary.json software.input_stream, once a batch went through

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        if self.mode == "inline":
            self.ran = streams.INLINE
            for batch in self.loader:
                yield self.prepare(batch)
            return
        side = streams.SideStream(self.device)
        self.ran = side.kind
        ready, first = None, True
        for batch in self.loader:
            with side:
                upcoming = self.prepare(batch)
            if not first:
                yield ready
            first = False
            side.wait()
            if self.hand_over:
                side.hand_over(upcoming.values() if isinstance(upcoming, dict) else upcoming)
            ready = upcoming
        if not first:
            yield ready


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Every tensor of ``batch`` copied to ``device`` without blocking the host (the loader pins
    them where it pins); other values as they are."""
    return {
        key: value.to(device, non_blocking=True) if isinstance(value, torch.Tensor) else value
        for key, value in batch.items()
    }
