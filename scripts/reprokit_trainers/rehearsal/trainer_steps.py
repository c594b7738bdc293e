"""The end of the device half for a cell that transformers' Trainer trains (BridgeTower's, image
classification's): two of the Trainer's own training steps on the fake device, and the result the
rehearsal records."""

from __future__ import annotations

from typing import Any

from .fakedevice import FakeDevice, estimate


def two_steps(
    built: Any,
    wrapped: Any,
    batch: Any,
    device: FakeDevice,
    precision: str,
    done: tuple[list[str], list[str], int],
) -> dict[str, Any]:
    """``built``'s training_step on ``wrapped`` (its model as accelerate prepared it), its optimizer's
    step and zero_grad, twice: the second step holds the optimizer's state from the first. ``done``: what
    the device half ran and skipped so far, and the parameters it counted."""
    ran, skipped, parameters = done
    with device.on():
        batch = device.put(batch)
        for _ in range(2):
            built.training_step(wrapped, batch)
            built.optimizer.step()
            built.optimizer.zero_grad(set_to_none=True)
    ran.append(
        f"2 training steps: Trainer.training_step under accelerate's {precision} autocast, backward, optimizer step"
    )
    skipped.append("DDP: one process (the node's one GPU) has no DDP wrapper, as the Trainer runs it")
    return {
        "ran": ran,
        "skipped": skipped,
        "parameters": parameters,
        "memory": estimate(device.live.peak, {}),
    }
