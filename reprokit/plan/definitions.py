"""What a throughput figure counts: the definitions the publications used and the trainers record.

A measured number is judged against a published one only under the same definition (results/verdicts.py).
The trainers write each definition they can measure into summary.json under `throughput`.
"""

from __future__ import annotations

from typing import Literal

Definition = Literal["after_warmup", "whole_run", "gaudi_trainer"]

DEFINITIONS: dict[str, str] = {
    "after_warmup": (
        "steady state: global samples of the steps after the warm-up steps, over the time from the end of "
        "the last warm-up step to the end of the last step (the kit's meter; VOLO's main.py log rate, data "
        "wait included; the ViT ladder's epoch times)"
    ),
    "whole_run": (
        "the stock transformers Trainer's train_samples_per_second: the dataset's samples x epochs (max_steps "
        "x global batch when max_steps is set) over the whole train() call, warm-up, compilation and the "
        "first batches included (the GPU BridgeTower figures)"
    ),
    "gaudi_trainer": (
        "GaudiTrainer's train_samples_per_second: (the dataset's samples x epochs - warm-up steps x global "
        "batch) over the time from the start of the first step after the warm-up steps to the end of "
        "training (the Gaudi2 BridgeTower figures)"
    ),
}
# Definitions whose figure depends on how long the run is (its warm-up share): comparable only for a
# run of the published length.
LENGTH_DEPENDENT = ("whole_run",)
