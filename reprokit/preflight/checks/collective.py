"""Across nodes: the stepped multi-node runs joined their ranks with the chosen backend, and which NIC
each rank used (bind-rank.sh's line per rank; NCCL's own choice where it was left to NCCL)."""

from __future__ import annotations

import re
from pathlib import Path

from reprokit.contract import records
from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

# bind-rank.sh: "reprokit: n1 local rank 0 -> NUMA node 3, NIC mlx5_0" (or "... unbound: why, NIC ...").
RANK_LINE = re.compile(r"reprokit: (\S+) local rank (\d+) (?:-> NUMA node \S+|unbound: [^,]*), NIC (.+?)\s*$")
# NCCL_DEBUG=INFO: "n1:811:811 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:..."
NCCL_NET = re.compile(r"^(?:\d+: )?(\S+?):\d+:\d+ \[\d+\] NCCL INFO NET/(\w+) : Using (.+?)(?: ;|$)")


def nics(log: str) -> list[str]:
    """Each rank's card as bind-rank.sh said it, then NCCL's per node: 'n1 rank 0: mlx5_0'."""
    found = [
        f"{m.group(1)} rank {m.group(2)}: {m.group(3)}"
        for line in log.splitlines()
        if (m := RANK_LINE.search(line))
    ]
    nccl = {}
    for line in log.splitlines():
        match = NCCL_NET.search(line)
        if match:
            nccl.setdefault(
                match.group(1), f"{match.group(1)} NCCL NET/{match.group(2)}: {match.group(3).strip()}"
            )
    return found + list(nccl.values())


class Collective(Check):
    name = "collective"

    def applies(self, context: Context) -> bool:
        return context.steps and any(c.nodes > 1 for c in context.cells)

    def run(self, context: Context) -> list[Finding]:
        backend = context.profile.slurm.distributed_backend
        found = []
        for cell in context.cells:
            run_dir = context.stepped.get(cell.cell_id)
            if cell.nodes < 2 or run_dir is None:
                continue
            record = records.read(run_dir)
            if record.status != "ok":
                continue  # the steps' finding says why
            log = Path(run_dir / records.FILES["stdout"]).read_text(errors="replace")
            used = nics(log)
            world = record.summary.world_size if record.summary else None
            found.append(
                self.finding(
                    f"{cell.cell_id}: {backend} across {cell.nodes} nodes ({world} ranks) joined; NICs: "
                    + (
                        "; ".join(used)
                        if used
                        else "not said in the log (no InfiniBand, or NCCL_DEBUG unset)"
                    )
                )
            )
        return found
