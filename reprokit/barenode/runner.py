"""A slice on a bare node (`python -m reprokit.barenode run SLICE`, started by scripts/barenode/run.py
once the bundle is installed): its checks, then its cells one by one through the kit's local runtime
with no container, in this Python. Everything a run must send back goes into the output folder as it
is known, so a run stopped at any moment (its time limit, a signal) returns what it finished:

    OUT/runner.log             every line this run printed, appended as printed
    OUT/checks.json            the node's checks: device, software, matmul peak, energy
    OUT/results.csv, .jsonl    the kit's rows of the cells so far, rewritten the moment each cell ends
    OUT/node-<slice>.tar.gz    the archive (archive.py), rewritten after each cell

`--budget-s` is the wall time the whole run may take, counted from when the node command started
(the bundle's install included): a cell whose expected seconds do not fit in what is left is not
started and says so, and a cell that overruns is stopped at the budget's end, with time kept to pack.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reprokit.barenode import archive, node_checks, slices
from reprokit.collect import collect
from reprokit.contract import files, rundirs, sessions
from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.plan.planner import Plan
from reprokit.plan.request import Request
from reprokit.run import machinelock, session, supervise
from reprokit.run.containers.none import NoContainer
from reprokit.run.handles import NoOptions
from reprokit.run.runtimes.base import write_run_dir_inputs
from reprokit.run.runtimes.local import LocalRuntime

# Kept back from the budget for the last rows, the report and the archive.
RESERVE_S = 20.0
STARTED_ENV = "REPROKIT_NODE_STARTED"  # when the node command started (scripts/barenode/run.py)


class Log:
    """Lines to the terminal and to OUT/runner.log, each flushed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.time()

    def __call__(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        line = f"[{stamp}] {text}"
        print(line, flush=True)
        with files.open_append(self.path) as fh:
            fh.write((line + "\n").encode())


@contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGHUP (a time limit, a closed session) stop the run as Ctrl-C does: the running
    cell is stopped and recorded as interrupted, and what was finished is written out."""

    def interrupt(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class NodeRun:
    def __init__(
        self,
        slice_name: str,
        out: Path,
        scratch: Path,
        budget_s: float,
        slices_file: Path = slices.SLICES_FILE,
        accelerator: str = "cuda",
        started: float | None = None,
    ) -> None:
        self.slice_name = slice_name
        self.out = files.make_dir(out)
        self.scratch = files.make_dir(scratch)
        self.budget_s = budget_s
        self.started = started if started is not None else float(os.environ.get(STARTED_ENV) or time.time())
        self.accelerator = accelerator
        self.log = Log(self.out / "runner.log")
        self.spec = slices.get(slice_name, slices_file)
        self.planned = slices.plan(slice_name, accelerator, slices_file)
        self.profile = accelerators.get(accelerator)
        self.checks: dict[str, Any] = {}
        self.archive_file = self.out / f"node-{slice_name}.tar.gz"
        self.session_dir: Path | None = None

    # -- time ----------------------------------------------------------------------------------

    def left(self) -> float:
        return self.budget_s - (time.time() - self.started)

    # -- the session ---------------------------------------------------------------------------

    def open_session(self) -> Path:
        cells = [p.cell for p in self.planned]
        request = Request(
            recipes=sorted({c.recipe for c in cells}),
            accelerator=self.accelerator,
            scale=self.spec.scale,
            runtime="local",
            container="none",
            variants=[c.variant for c in cells],
            devices=1,
            timeout=self.budget_s,
        )
        plan = Plan(self.profile, self.spec.scale, "local", cells, [], 1, None, "none")
        self.session_dir = session.new_dir(str(self.scratch / "results"))
        session.save(self.session_dir, plan, request)
        return self.session_dir

    def collect_rows(self) -> None:
        """The session's results.csv and .jsonl from its run directories (never the reverse)."""
        assert self.session_dir is not None
        collect.collect(self.session_dir)

    def copy_rows_out(self) -> None:
        assert self.session_dir is not None
        for name in (sessions.RESULTS_CSV, sessions.RESULTS_JSONL):
            # Whole (results files are a few KB), through the kit's writer: never a planted link.
            files.write_bytes(self.out / name, (self.session_dir / name).read_bytes())

    def pack(self) -> dict[str, Any]:
        assert self.session_dir is not None
        parts = {
            "session": self.session_dir,
            "checks.json": self.out / "checks.json",
            "runner.log": self.out / "runner.log",
            "nvidia-smi-q.txt": self.scratch / "nvidia-smi-q.txt",
        }
        return archive.pack(self.archive_file, parts)

    def settle(self, final: bool = False) -> None:
        """Rows and archive as they stand; a write that fails is said, never fatal to the cells."""
        try:
            self.collect_rows()
            if final:
                from reprokit.report import report

                report.write(self.session_dir)
        except (OSError, ReprokitError) as error:
            self.log(f"results not written: {error}")
            return
        try:
            packed = self.pack()
        except OSError as error:
            self.log(f"archive not written: {error}")
        else:
            if final:
                self.log(
                    f"archive: {self.archive_file} ({packed['bytes'] / 2**20:.1f} MiB, {packed['files']} files"
                    + (f"; {'; '.join(packed['left_out'])}" if packed["left_out"] else "")
                    + ")"
                )
        # The rows go out after the archive that holds them: a run killed between the two leaves an
        # archive ahead of its rows, never rows whose run directories the archive lacks.
        try:
            self.copy_rows_out()
        except OSError as error:
            self.log(f"results not written: {error}")

    # -- checks --------------------------------------------------------------------------------

    def device_check(self) -> None:
        self.checks["devices"] = node_checks.devices(self.accelerator, self.profile, self.scratch, self.log)

    def trainer_check(self) -> bool:
        found, usable = node_checks.trainers_here(self.planned, self.spec.checks, self.scratch, self.log)
        self.checks.update(found)
        return usable

    def write_checks(self) -> None:
        files.write_json(self.out / "checks.json", {"slice": self.slice_name, **self.checks})

    # -- cells ---------------------------------------------------------------------------------

    def run(self) -> int:
        self.log(f"slice {self.slice_name}: {self.spec.title}")
        expected = sum(p.seconds for p in self.planned if not p.left_out)
        self.log(
            f"{len(self.planned)} cells, about {expected:.0f} s by their estimates; budget {self.budget_s:.0f} s, "
            f"{self.left():.0f} s left"
        )
        self._announce_skips()
        self.open_session()
        outcomes: dict[str, dict[str, Any]] = {}
        runtime = LocalRuntime(NoOptions(), NoContainer(NoOptions()))
        with _signals_stop():
            try:
                # Every slice records the device and `nvidia-smi -q`; the check slice says more.
                self.device_check()
                usable = self.trainer_check()
                self.write_checks()
                self._data_env()
                runtime.check(self.profile)
                # One measurement per machine, as every session of the kit: a run already here is waited for.
                with machinelock.held(self.session_dir, self.log):
                    for planned in self.planned:
                        outcomes[planned.cell.cell_id] = self._one(planned, runtime, outcomes, usable)
                        self.settle()
            except KeyboardInterrupt as stop:
                self.log(f"stopped ({stop or 'Ctrl-C'}): the running cell is recorded as interrupted")
                self._not_started(outcomes, "not started: the run was stopped")
            except ReprokitError as error:
                self.log(f"cells cannot run here: {error}")
                self._not_started(outcomes, f"not started: {error}")
        self.settle(final=True)
        failed = [i for i, o in outcomes.items() if o.get("status") not in ("ok", "skipped")]
        skipped = [i for i, o in outcomes.items() if o.get("status") == "skipped"]
        self.log(
            f"done in {time.time() - self.started:.0f} s: {len(outcomes) - len(failed) - len(skipped)} ok, "
            f"{len(failed)} did not complete, {len(skipped)} skipped; rows in {self.out / sessions.RESULTS_CSV}"
        )
        # Exit 0 only when every cell the slice runs here ran: a skip for the budget is work not done.
        not_run = [i for i in skipped if not outcomes[i].get("error", "").startswith("left out")]
        return 1 if failed or not_run else 0

    def _announce_skips(self) -> None:
        clock, late = time.time() - self.started, []
        for planned in self.planned:
            if planned.left_out:
                self.log(f"left out: {planned.cell.cell_id}: {planned.left_out}")
                continue
            clock += planned.seconds
            if clock > self.budget_s - RESERVE_S:
                late.append(planned.cell.cell_id)
        if late:
            self.log(
                f"by the estimates these would not fit in --budget-s {self.budget_s:.0f}: {', '.join(late)}"
            )

    def _data_env(self) -> None:
        """Synthetic data written once on the node and read by every cell: VOLO's and the ViT's JPEG
        pools as files, BridgeTower's rows in one datasets cache (recorded as synthetic data)."""
        os.environ["REPROKIT_SYNTHETIC_FILES"] = str(self.scratch / "synthetic-jpegs")
        os.environ["HF_DATASETS_CACHE"] = str(self.scratch / "datasets")

    def _one(
        self,
        planned: slices.Planned,
        runtime: LocalRuntime,
        outcomes: dict[str, dict[str, Any]],
        usable: bool,
    ) -> dict[str, Any]:
        cell = planned.cell
        assert self.session_dir is not None
        run_dir = self.session_dir.resolve() / sessions.RUNS / cell.cell_id
        write_run_dir_inputs(cell, self.profile, run_dir)
        failed_needs = [c for c in cell.needed_cells().values() if outcomes.get(c, {}).get("status") != "ok"]
        left = self.left() - RESERVE_S
        if planned.left_out:
            reason = f"left out on this node: {planned.left_out}"
        elif not usable:
            reason = "not started: the trainers do not import in this Python (checks.json, software)"
        elif failed_needs:
            reason = f"needs {', '.join(failed_needs)}, which did not complete"
        elif planned.seconds > left:
            reason = (
                f"not started: needs about {planned.seconds:.0f} s, {max(left, 0):.0f} s of --budget-s "
                f"{self.budget_s:.0f} left"
            )
        else:
            self.log(f"{cell.cell_id}: starting (about {planned.seconds:.0f} s, {left:.0f} s left)")
            begun = time.time()
            outcome = supervise.run_cell(
                runtime, cell, run_dir, self.profile, timeout=left,
                timeout_set_by=f"what was left of --budget-s {self.budget_s:.0f}",
            )  # fmt: skip
            self.log(f"{cell.cell_id}: {self._said(cell, outcome)} [{time.time() - begun:.0f} s]")
            return outcome
        self.log(f"{cell.cell_id}: skipped: {reason}")
        return rundirs.skip(run_dir, reason)

    @staticmethod
    def _said(cell: Any, outcome: dict[str, Any]) -> str:
        if outcome.get("status") == "ok":
            rate = outcome.get("samples_per_second")
            shown = f"{rate:,.1f} {cell.unit}" if isinstance(rate, int | float) else "no rate"
            return f"ok, {shown} over {outcome.get('steps')} steps"
        return f"{outcome.get('status')}: {outcome.get('error')}"

    def _not_started(self, outcomes: dict[str, dict[str, Any]], reason: str) -> None:
        assert self.session_dir is not None
        for planned in self.planned:
            cell = planned.cell
            if cell.cell_id in outcomes:
                continue
            run_dir = self.session_dir.resolve() / sessions.RUNS / cell.cell_id
            write_run_dir_inputs(cell, self.profile, run_dir)
            if not rundirs.summary(run_dir):
                outcomes[cell.cell_id] = rundirs.skip(run_dir, reason)
            else:
                outcomes[cell.cell_id] = rundirs.summary(run_dir) or {}


def run(slice_name: str, out: Path, scratch: Path, budget_s: float, *where: Any, **named: Any) -> int:
    """Run a slice (NodeRun's arguments: the slices file, the accelerator, when the node command began)."""
    return NodeRun(slice_name, out, scratch, budget_s, *where, **named).run()
