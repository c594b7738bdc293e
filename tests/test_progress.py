"""Progress on long sessions: the running cell's bar follows the trainer's throughput.csv (steps done
of its total, samples/s, time left), and the matrix's counts the cells."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from reprokit.run.progress import MatrixProgress


def test_the_cell_bar_follows_the_trainers_throughput_rows(tmp_path):
    console = Console(file=io.StringIO(), force_terminal=False, width=160)
    with MatrixProgress(console, cells=2) as bars:
        bars.start_cell("[1/2] fake--v", total_steps=None)
        bars.update(tmp_path, "Slurm job 7 pending (Resources)")
        cell = bars.progress._tasks[bars.cell]
        assert cell.fields["detail"] == "Slurm job 7 pending (Resources)" and cell.total is None
        (tmp_path / "throughput.csv").write_text(
            "step,epoch,elapsed_s,samples,samples_per_second,loss,learning_rate,steps_total\n"
            "10,0.1,5.0,480,96.5,2.3,1e-05,40\n"
        )
        bars.update(tmp_path, "running")
        cell = bars.progress._tasks[bars.cell]
        assert (cell.completed, cell.total) == (10, 40)
        assert cell.fields["detail"].startswith("96.5/s, about ") and cell.fields["detail"].endswith("s left")
        bars.finish_cell("ok     [1/2] fake--v")
        assert bars.cell is None and bars.progress._tasks[bars.matrix].completed == 1
    assert "ok     [1/2] fake--v" in console.file.getvalue()


def _bytes_read() -> int:
    """Bytes this process has read through read(2) so far (the kernel's own count)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_the_cell_bar_reads_only_what_the_trainer_appended(tmp_path):
    """A long run's throughput.csv holds millions of rows: the bar, asked twice a second, must not
    read it all again each time."""
    path = tmp_path / "throughput.csv"
    header = "step,epoch,elapsed_s,samples,samples_per_second,loss,learning_rate,steps_total\n"
    with open(path, "w") as fh:
        fh.write(header)
        fh.writelines(f"{step},0.1,{step * 0.5},48,96.5,2.3,1e-05,1000000\n" for step in range(1, 200_001))
    size = path.stat().st_size
    console = Console(file=io.StringIO(), force_terminal=False, width=160)
    with MatrixProgress(console, cells=1) as bars:
        bars.start_cell("[1/1] fake--v", total_steps=None)
        before = _bytes_read()
        bars.update(tmp_path, "running")
        first = _bytes_read() - before
        assert bars.progress._tasks[bars.cell].completed == 200_000
        with open(path, "a") as fh:
            fh.write("200001,0.1,100000.5,48,97.5,2.2,1e-05,1000000\n")
        before = _bytes_read()
        for _ in range(10):
            bars.update(tmp_path, "running")
        again = _bytes_read() - before
        cell = bars.progress._tasks[bars.cell]
        assert cell.completed == 200_001 and cell.fields["detail"].startswith("97.5/s")
    assert first < size / 10, f"the first look read {first} of {size} bytes"
    assert again < 4096, f"ten looks after one appended row read {again} bytes"
