"""The preflight's checks, one per concern, in the order they run: each reads the context (and what the
checks before it found) and returns its findings. A new concern is one module with a `Check` subclass
and one line in CHECKS."""

from __future__ import annotations

from reprokit.preflight.checks.base import Check
from reprokit.preflight.checks.collective import Collective
from reprokit.preflight.checks.data import Data
from reprokit.preflight.checks.devices import Devices
from reprokit.preflight.checks.image import Image
from reprokit.preflight.checks.steps import Steps
from reprokit.preflight.checks.storage import Storage
from reprokit.preflight.checks.trainers import Trainers

CHECKS: tuple[type[Check], ...] = (Devices, Image, Trainers, Data, Storage, Steps, Collective)

__all__ = ["CHECKS", "Check"]
