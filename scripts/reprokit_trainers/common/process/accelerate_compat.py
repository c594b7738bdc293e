"""The stock Trainer of transformers 4.49 beside accelerate 0.33 (the release optimum-habana 1.17
requires, so the gaudi2 image's): what both kit trainers on the HF Trainer need to take a step there."""

from __future__ import annotations

from typing import Any


def give_optimizer_train_modes(optimizer: Any) -> None:
    """transformers 4.49 calls ``optimizer.train()`` whenever accelerate's wrapper has that method, and
    accelerate 0.33 forwards it to the wrapped optimizer unguarded: torch's AdamW has no train mode, and
    the first step fails. GaudiTrainer leaves the call out; accelerate 0.34 guards it. Off an HPU in the
    gaudi2 image, the stock Trainer gets what accelerate 0.34 does: no train/eval mode is a no-op."""
    inner = getattr(optimizer, "optimizer", None)
    if inner is not None and not hasattr(inner, "train"):
        inner.train = inner.eval = lambda: None
