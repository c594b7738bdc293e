"""Stalls: a step of the measured window whose wall time is many times the run's median step. A
stopped process (SIGSTOP, a debugger), a preempted VM or a stalled read takes seconds or minutes out
of the window, and the figure over it is then a figure of the pause, not of the training: the meter
records each such step with its length (summary.json `stalls`), and where they cost a noticeable
share of the window, a departure of kind throughput that says so.

The clock is the meter's own (read at each step's end, host side): one subtraction and an append per
step, nothing synchronized. A step counts as a stall only when it is both many times the median step
and long in itself (a logging step that waits for the device's queued steps, a collection by Python's
garbage collector, are neither), and the stalls together must cost a share of the window that would
move the figure.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

# A step this many times the median step ...
FACTOR = 10.0
# ... and at least this long is a stall (a loader's workers started again at an epoch's end take a
# few seconds at most; a stopped or preempted process, a hung read, take longer).
MIN_STALL_S = 5.0
# Stalls that cost less of the measured window than this do not move the figure beyond its noise.
MIN_SHARE = 0.01
# Stalls named in summary.json, longest first.
KEPT = 20


def _median(values: array) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass
class StallWatch:
    """The measured window's step intervals (seconds between consecutive step ends, host clock)."""

    intervals: array = field(default_factory=lambda: array("d"))
    first_step: int = 0  # the step whose interval is intervals[0]
    _last: float | None = None

    def restart(self, now: float) -> None:
        """The measured window starts now (after the warm-up's synchronization): no interval before it."""
        self.intervals = array("d")
        self._last = now

    def step(self, step: int, now: float, measured: bool) -> None:
        """A step ended at `now`; its interval is kept when it is in the measured window."""
        if measured and self._last is not None:
            if not self.intervals:
                self.first_step = step
            self.intervals.append(now - self._last)
        self._last = now

    def found(self) -> tuple[float | None, list[tuple[int, float]]]:
        """(the median step, [(step, seconds)] of each stall, longest first)."""
        if len(self.intervals) < 3:  # too few steps to have a median worth the name
            return None, []
        median = _median(self.intervals)
        bar = max(FACTOR * median, MIN_STALL_S)
        stalls = [(self.first_step + i, s) for i, s in enumerate(self.intervals) if s >= bar]
        return median, sorted(stalls, key=lambda item: -item[1])

    def summary(self) -> dict[str, Any]:
        """summary.json's `stalls`: the median step and each stall (step, seconds)."""
        median, stalls = self.found()
        return {
            "median_step_s": None if median is None else round(median, 6),
            "found": [{"step": step, "seconds": round(seconds, 3)} for step, seconds in stalls[:KEPT]],
            "rule": f"a measured step at least {FACTOR:g}x the median step and {MIN_STALL_S:g} s long",
        }

    def departure(self, window_s: float | None) -> str | None:
        """The throughput departure the stalls make, when they cost at least MIN_SHARE of the window
        (`window_s`, the after-warm-up figure's seconds); None otherwise."""
        median, stalls = self.found()
        if median is None or not stalls or not window_s:
            return None
        lost = sum(seconds - median for _, seconds in stalls)
        if lost / window_s < MIN_SHARE:
            return None
        step, longest = stalls[0]
        what = (
            f"the run stalled for {longest:.1f} s at step {step}"
            if len(stalls) == 1
            else f"the run stalled {len(stalls)} times, {lost + median * len(stalls):.1f} s in all "
            f"(the longest {longest:.1f} s at step {step})"
        )
        return (
            f"{what}, against a median step of {median:.3g} s: {lost / window_s:.0%} of the measured window "
            "(a stopped process, a preempted machine or a stalled read)"
        )
