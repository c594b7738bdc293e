"""What a rehearsed cell carries from its real half (arguments, data, one batch, on the CPU) to its
device half (model, optimizer, steps, on the fake device)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Arguments that change only the host's side of a step (how many rows, workers, logs, the seed): cells
# that differ in these alone share one device step. Each trainer adds its own data sizes.
HOST_ONLY = ("dataloader_num_workers", "logging_steps", "throughput_warmup_steps", "max_steps", "synthetic_num_train",
             "seed")  # fmt: skip
# The image trainers' (ViT's, VOLO's) synthetic pool of JPEGs: how many, not what a step computes.
IMAGE_HOST_ONLY = (*HOST_ONLY, "synthetic_pool_size")


@dataclass
class Prepared:
    trainer: str
    parsed: tuple[Any, ...]  # the trainer's parsed argument dataclasses
    data: dict[str, Any]  # what the device half needs of the data (a batch, a loader, sizes)
    ran: list[str] = field(default_factory=list)  # what went through the trainer's own code, in order
    notes: list[str] = field(default_factory=list)  # how the rehearsal differs from the node's run
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


def economy_note(economy: dict[str, tuple[Any, Any]]) -> str:
    """One line of what the rehearsal's data path makes smaller than the cell (never the batch)."""
    changed = [f"{name} {was} -> {now}" for name, (was, now) in economy.items() if was != now]
    return "data path made small for the CPU: " + (", ".join(changed) if changed else "nothing")
