"""What a rehearsed cell carries from its real half (arguments, data, one batch, on the CPU) to its
device half (model, optimizer, steps, on the fake device)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Arguments that change only the host's side of a step (how many rows, workers, logs, the seed) or
# nothing the fake device counts (TF32: a matmul's precision, set for each cell by its own prepare):
# cells that differ in these alone share one device step. Each trainer adds its own.
HOST_ONLY = ("dataloader_num_workers", "logging_steps", "throughput_warmup_steps", "max_steps", "synthetic_num_train",
             "seed", "tf32")  # fmt: skip
# The image trainers' (ViT's, VOLO's) synthetic pool of JPEGs: how many, not what a step computes.
IMAGE_HOST_ONLY = (*HOST_ONLY, "synthetic_pool_size")


@dataclass
class Prepared:
    trainer: str
    parsed: tuple[Any, ...]  # the trainer's parsed argument dataclasses
    data: dict[str, Any]  # what the device half needs of the data (a batch, a loader, sizes)
    ran: list[str] = field(default_factory=list)  # what went through the trainer's own code, in order
    notes: list[str] = field(default_factory=list)  # how the rehearsal differs from the node's run
    # What this cell's arguments leave unrun here (a compile, a CUDA check): the cell's own, said even
    # where its device step is another cell's.
    skipped: list[str] = field(default_factory=list)
    batch: int = 0
    image_size: int = 0
    precision: str = ""


def shrink_image_data(data_args: Any, workers_cap: int) -> dict[str, tuple[Any, Any]]:
    """The image trainers' data path made small for the CPU (the synthetic pool and the loader
    workers; never the batch), set on `data_args`: each changed name with (was, now)."""
    economy = {
        "synthetic_pool_size": (data_args.synthetic_pool_size, min(data_args.synthetic_pool_size, 16)),
        "dataloader_num_workers": (
            data_args.dataloader_num_workers,
            min(data_args.dataloader_num_workers, workers_cap),
        ),
    }
    for name, (_, now) in economy.items():
        setattr(data_args, name, now)
    return economy


def first_batch(loader: Any) -> Any:
    """The first batch of the trainer's own loader, its workers asked for one batch ahead each, not
    torch's two: the rehearsal takes one batch, and every other one drawn is decoded for nothing
    (the ViT rehearsal's loader workers spent 30 CPU-s on 4 batches a cell with 2 workers)."""
    if loader.num_workers > 0:
        loader.prefetch_factor = 1
    return next(iter(loader))


def economy_note(economy: dict[str, tuple[Any, Any]]) -> str:
    """One line of what the rehearsal's data path makes smaller than the cell (never the batch)."""
    changed = [f"{name} {was} -> {now}" for name, (was, now) in economy.items() if was != now]
    return "data path made small for the CPU: " + (", ".join(changed) if changed else "nothing")


def handed_over(value: Any) -> tuple[Any, ...]:
    """The shape, dtype and strides of each tensor in `value` (a prepared cell's data: dicts, lists, tuples and
    dataclasses walked, anything else passed over), in order: what the device step is handed decides
    its memory as much as its arguments do, so that cells whose loaders differ share a device step
    only where their batches are the same."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        stride = value.stride() if callable(getattr(value, "stride", None)) else None
        return ((tuple(value.shape), str(value.dtype), stride),)
    if isinstance(value, dict):
        named = ((key, handed_over(entry)) for key, entry in value.items())
        return tuple((key, inner) for key, inner in named if inner)
    if isinstance(value, (list, tuple)):
        return tuple(item for entry in value for item in handed_over(entry))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return handed_over({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return ()
