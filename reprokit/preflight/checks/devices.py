"""Devices: what this machine has (count, model, MIG), whether the cells' layout fits it, and whether a
published figure exists for its device."""

from __future__ import annotations

from reprokit.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.plan.planner import fitted_devices
from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding


class Devices(Check):
    name = "devices"

    def run(self, context: Context) -> list[Finding]:
        plan = context.plan
        if plan.runtime != "local":
            # The nodes' devices are not this machine's: the stepped job counts them where it runs.
            gres = context.profile.slurm.gres
            asked = f"--gpus-per-node from {gres}" if gres else "whole nodes"
            return [self.finding(f"on the {plan.runtime} nodes ({asked}): counted by the stepped job itself")]
        found = []
        several = tuple(c.cell_id for c in context.cells if c.nodes > 1)
        if several:
            found.append(
                self.finding(
                    "the local runtime runs one node; several nodes need --runtime slurm", True, several
                )
            )
        try:
            here = accelerators.devices_here(plan.accelerator)
            devices = fitted_devices(plan.accelerator, plan.scale, context.request.devices)
        except ReprokitError as error:
            return [*found, self.finding(str(error), blocks=True)]
        found.append(self.finding(f"{here.describe()} ({plan.accelerator})"))
        for cell in context.cells if devices is not None else []:
            cell.devices = devices  # what the session would run: the published count, capped at what is here
        key = context.profile.device_key(here.model)
        missing = tuple(
            c.cell_id
            for c in context.cells
            if c.scale == "published"
            and not c.beyond
            and not any(r.get("device") == key for r in c.references)
        )
        if missing:
            published_on = sorted(
                {r["device"] for c in context.cells for r in c.references if r.get("device")}
            )
            found.append(
                self.finding(
                    f"no published figure for {here.model} ({key or 'a device no recipe names'}): the figures are on "
                    f"{', '.join(published_on) or 'no device'}",
                    True,
                    missing,
                )
            )
        return found
