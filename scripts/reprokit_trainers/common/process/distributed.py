"""The process group and this process's place in it, for the trainers that run their own loop.

torchrun and the Slurm scripts start one process per device and set ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE``; these helpers read them, so they answer the same before and after the group exists
(the run directory is opened before it is).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def global_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return global_rank() == 0


def log(message: str) -> None:
    """Print on global rank 0 only: every rank would print the same line."""
    if is_main_process():
        print(message, flush=True)


def accelerator_device() -> torch.device:
    """This rank's device: the HPU, its CUDA device (``LOCAL_RANK``), else the CPU."""
    hpu = getattr(torch, "hpu", None)
    if hpu is not None and hpu.is_available():
        return torch.device("hpu")
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def init_process_group(device: torch.device, single_process_group: bool = False) -> tuple[int, int]:
    """Join torchrun's group (NCCL on CUDA, gloo elsewhere); returns (rank, world size).

    A process started alone joins no group, unless ``single_process_group``: then it makes a 1-rank
    group in memory (no port, no rendezvous), so that DDP and FSDP wrap the model exactly as they
    do on 8 devices.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before NCCL starts: each rank on its own device
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if world_size() > 1:
            dist.init_process_group(backend)
        elif single_process_group:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def reduce_mean(value: torch.Tensor) -> float:
    """The mean of a scalar over all ranks (all ranks must call it at the same step)."""
    value = value.detach().float().clone()
    if not dist.is_initialized():
        return float(value)
    dist.all_reduce(value)
    return float(value) / dist.get_world_size()


def destroy_process_group() -> None:
    """Leave the group together: a rank that tears gloo down while a peer is still in its last
    collective can abort the peer (std::terminate) after its summary is written."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
