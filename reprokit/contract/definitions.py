"""What a throughput figure counts: the definitions the publications used and the trainers record
(the run-directory contract's `definitions`). A measured number is judged against a published one
only under the same definition (judge/verdicts.py)."""

from __future__ import annotations

from typing import Literal

from reprokit.contract.trainers import contract

DEFINITIONS: dict[str, str] = contract()["definitions"]
Definition = Literal[tuple(DEFINITIONS)]  # type: ignore[valid-type]
# Definitions whose figure depends on how long the run is (its warm-up share): comparable only for a
# run of the published length.
LENGTH_DEPENDENT: tuple[str, ...] = tuple(contract()["length_dependent_definitions"])
