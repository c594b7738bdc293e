"""`torchrun ... -m reprokit_trainers.devicecheck.allreduce --out allreduce.json [--megabytes 64] [--iters 20]`

The collective between the nodes of one job (an acceptance run's pair of nodes, reprokit/fleet/pairs.py):
all-reduce of a float32 tensor on each rank's device, with the backend the trainers use (NCCL on CUDA,
gloo on the CPU), timed over `--iters` after a few untimed ones. Bus bandwidth is nccl-tests' figure,
the algorithm bandwidth times 2 (n - 1) / n, so that a pair and a larger group read alike. Rank 0
writes the JSON; every rank prints its host.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from reprokit_trainers.common.process.distributed import accelerator_device, init_process_group

WARMUP = 3


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--out", required=True)
    parser.add_argument("--megabytes", type=float, default=64.0)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    device = accelerator_device()
    rank, world = init_process_group(device)
    hosts: list[str | None] = [None] * world
    if dist.is_initialized():
        dist.all_gather_object(hosts, os.environ.get("REPROKIT_MACHINE") or socket.gethostname())
    print(f"allreduce: rank {rank} of {world} on {hosts[rank]} ({device})", flush=True)
    elements = max(int(args.megabytes * 2**20 / 4), 1)
    tensor = torch.ones(elements, dtype=torch.float32, device=device)
    for _ in range(WARMUP):
        dist.all_reduce(tensor)
    _synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(tensor)
    _synchronize(device)
    seconds = (time.perf_counter() - started) / args.iters
    size = elements * 4
    algbw = size / seconds / 1e9
    if rank == 0:
        result = {
            "backend": dist.get_backend(),
            "world_size": world,
            "hosts": hosts,
            "bytes": size,
            "iters": args.iters,
            "seconds_per_iter": seconds,
            "algbw_gb_s": algbw,
            "busbw_gb_s": algbw * 2 * (world - 1) / world,
        }
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
