"""Devices: what this machine has (count, model, MIG), whether the cells' layout fits it, and the key its
device has in the recipes' references (an accelerator profile's device_names): a published cell with no figure
for it runs with no reference, never "would not"."""

from __future__ import annotations

from reprokit.contract.errors import ReprokitError
from reprokit.plan import listing
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
            try:
                where = context.runtime.where(context.cells)
            except ReprokitError as error:
                return [self.finding(str(error), blocks=True)]
            there = f"{where}; " if where else ""
            return [
                self.finding(
                    f"{there}on the {plan.runtime} nodes ({asked}): counted by the stepped job itself"
                )
            ]
        found = []
        several = tuple(c.cell_id for c in context.cells if c.nodes > 1)
        if several:
            found.append(
                self.finding(
                    "the local runtime runs one node; several nodes need --runtime slurm", True, several
                )
            )
        asked = context.request.devices
        try:
            here = listing.devices_here(plan.accelerator)
        except listing.CannotCount as error:
            if asked is None:
                return [*found, self.finding(str(error), blocks=True)]
            # The count the refusal itself advises, used as given as `reproduce` uses it: said, not
            # refused (a driver's tool can be missing or broken where the devices answer; where the
            # cells run in this Python, the trainers check holds the count to what its torch sees).
            for cell in context.cells:
                cell.devices = asked
            context.devices_unverified = asked
            return [
                *found,
                self.finding(f"warning: --devices {asked} is used as given, not verified: {error.reason}"),
            ]
        try:
            devices = fitted_devices(plan.accelerator, plan.scale, asked, here)
        except ReprokitError as error:
            return [*found, self.finding(str(error), blocks=True)]
        found.append(self.finding(f"{here.describe()} ({plan.accelerator})"))
        for cell in context.cells if devices is not None else []:
            cell.devices = devices  # what the session would run: the published count, capped at what is here
        context.device_name = here.model
        context.device_key = context.profile.device_key(here.model)
        if any(c.scale == "published" and not c.beyond for c in context.cells):
            found.append(self._figures(context))
        return found

    def _figures(self, context: Context) -> Finding:
        """Which published cells have a figure for this device: the others run with no reference (a
        figure of another device is never set beside this one's number), never refused for it."""
        key = context.device_key
        published = [c for c in context.cells if c.scale == "published" and not c.beyond]
        # A ratio reference names no device: None is no device's key, never a match for one.
        with_figure = [
            c for c in published if key is not None and any(r.get("device") == key for r in c.references)
        ]
        ratios = [c for c in published if any(r.get("ratio") is not None for r in c.references)]
        parts = [f"{len(with_figure)} cell(s) have a published figure for it"]
        if ratios:
            parts.append(f"{len(ratios)} a published speedup (a ratio, on any device)")
        named = key or "a device no recipe names"
        return self.finding(
            f"{context.device_name} is {named} in the recipes' references: " + "; ".join(parts)
        )
