"""Progress on long sessions: the running cell's bar follows the trainer's throughput.csv (steps done
of its total, samples/s, time left), and the matrix's counts the cells."""

from __future__ import annotations

import io

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
