"""Progress on long sessions: the running cell's bar follows the trainer's throughput.csv (steps done
of its total, samples/s, time left), the matrix's counts the cells, and the table a session ends with
keeps each cell id on one line in a log (a grep for a cell finds its row)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from reprokit.judge.result_row import Row
from reprokit.report import terminal
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


# Cell ids as long as the recipes' (volo--pretrain-d1-modern-kernels is 32 characters) and longer.
LOGGED = [
    Row(cell_id="volo--pretrain-d1-modern-kernels-at-224-with-token-labels--n2", status="ok", unit="img/s",
        measured_per_device=123.4, reference_per_device=456.7, ratio_per_device=0.27, verdict="not comparable",
        verdict_reasons="smoke scale, synthetic data, shortened run (max_steps 40)", measured_speedup=1.0,
        published_speedup=1.0, speedup_verdict="not comparable", speedup_verdict_reasons="smoke scale"),
    Row(cell_id="bridgetower--workers2-gpu-decode-fused-compiled--r3", status="timeout", verdict="no result",
        error="timeout after 600 s (--timeout 600)"),
]  # fmt: skip


def _lines_naming(text: str, cell_id: str) -> list[str]:
    return [row for row in text.splitlines() if cell_id in row]


def test_a_sessions_table_in_a_log_keeps_each_cell_id_on_one_line(capsys, monkeypatch):
    """`inv reproduce ... | tee log`: stdout is not a terminal (pytest's capture is not one either), the
    shell saying COLUMNS=80. Before, the cell column folded (`volo--pretrain-d1-modern-kerne` / `ls`)."""
    monkeypatch.setenv("COLUMNS", "80")
    terminal.print_table(LOGGED)
    logged = capsys.readouterr().out
    for row in LOGGED:
        (in_table, *_) = _lines_naming(logged, row.cell_id)
        assert in_table.startswith("│ " + row.cell_id), in_table
    assert (
        "timeout bridgetower--workers2-gpu-decode-fused-compiled--r3: timeout after 600 s (--timeout 600)"
        in logged
    )


def test_a_table_printed_to_a_narrow_console_that_is_not_a_terminal_keeps_each_cell_id_whole():
    log = Console(file=io.StringIO(), width=80)  # a file: not a terminal
    terminal.print_table(LOGGED, log)
    for row in LOGGED:
        assert _lines_naming(log.file.getvalue(), row.cell_id), row.cell_id
