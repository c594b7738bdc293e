"""--profile: a torch.profiler trace of a few steps after the warm-up, written as gzipped Kineto
Chrome-trace JSON that loads in Python with the profiled steps, summarized in summary.json, and
recorded as what it is: a departure inside the measured window."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from reprokit_trainers.common.measure import profiling  # noqa: E402
from reprokit_trainers.common.measure.steps import StepLogger  # noqa: E402
from reprokit_trainers.common.record.rundir import RunDir  # noqa: E402
from tests.conftest import ROOT  # noqa: E402


def train(tmp_path, steps: int, profile: str | None, warmup: int = 2) -> dict:
    run_dir = RunDir(tmp_path / "run")
    logger = StepLogger(
        run_dir, warmup_steps=warmup, global_batch=8, logging_steps=2, total_steps=steps, profile=profile
    )
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters())
    batches = [torch.randn(8, 32) for _ in range(steps)]
    for step, batch in enumerate(logger.batches(batches), start=1):
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logger.step(step, 0.0, 1e-3, loss.detach(), last=step == steps)
    logger.close()
    return run_dir.write_summary(logger.meter)


def trace_steps(path) -> list[str]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    return sorted(
        {e["name"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")},
        key=lambda name: int(name.split("#")[1]),
    )


def test_a_profiled_run_writes_a_chrome_trace_of_the_steps_after_the_warmup(tmp_path):
    summary = train(tmp_path, steps=8, profile="{}")
    profile = summary["profile"]
    assert profile["schedule"] == {"wait": 2, "warmup": 1, "active": 3}
    assert profile["steps"] == [4, 6] and profile["trace"] == "profile/rank0.pt.trace.json.gz"
    path = tmp_path / "run" / profile["trace"]
    # Chrome-trace JSON as Perfetto and chrome://tracing read it, each traced step a named range.
    trace = json.loads(gzip.decompress(path.read_bytes()))
    assert isinstance(trace["traceEvents"], list) and any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert trace_steps(path) == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    # The kit's own summary: self time by operator category, and the top operators.
    categories = profile["cpu_self_time_by_category"]
    assert {"matmul", "optimizer"} <= set(categories)
    assert sum(c["share"] for c in categories.values()) == pytest.approx(1.0, abs=0.01)
    assert profile["cpu_top_ops"][0]["self_s"] >= profile["cpu_top_ops"][-1]["self_s"] > 0
    # The profiler's own cost falls inside the measured window: the figure says so.
    assert {
        "reason": "profiled: torch.profiler traced steps 4-6 inside the measured window",
        "kind": "throughput",
    } in summary["departures"]


def test_a_run_shorter_than_the_schedule_writes_the_steps_it_traced(tmp_path):
    summary = train(tmp_path, steps=5, profile='{"wait": 1, "active": 5}', warmup=1)
    assert summary["profile"]["steps"] == [3, 5]
    # Steps 3-5, and the range the profiler opened after the last one, closed when the run stopped it.
    found = trace_steps(tmp_path / "run" / summary["profile"]["trace"])
    assert found == [f"ProfilerStep#{n}" for n in (3, 4, 5, 6)]


def test_without_profile_nothing_is_traced_and_nothing_departs(tmp_path):
    summary = train(tmp_path, steps=4, profile=None)
    assert "profile" not in summary and not (tmp_path / "run" / "profile").exists()
    assert not any(d["reason"].startswith("profiled") for d in summary["departures"])


# One refusal as a user's shell sees it (a new process: its last line, exit 1, no traceback); the others from
# main in this process, where the same SystemExit carries the line (a new process is mostly importing torch).
@pytest.mark.parametrize(
    ("text", "says", "where"),
    [
        ('{"active": 0}', "active must be a whole number of steps, at least 1", "process"),
        ('{"steps": 3}', "unknown key 'steps' (keys: wait, warmup, active)", "main"),
        ("[1, 2]", "give a JSON object with keys wait, warmup, active", "main"),
        ("three", """give a JSON schedule such as '{"warmup": 1, "active": 3}'""", "main"),
    ],
)
def test_a_schedule_that_is_not_one_is_refused_in_one_line(tmp_path, capsys, text, says, where):
    argv = ["--output_dir", str(tmp_path / "run"), "--profile", text]
    if where == "process":
        result = subprocess.run(
            [sys.executable, "-m", "reprokit_trainers.vit", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert result.returncode == 1 and "Traceback" not in result.stderr
        line = result.stderr.strip().splitlines()[-1]
    else:
        from reprokit_trainers.vit import run_vit

        with pytest.raises(SystemExit) as raised:
            run_vit.main(argv)
        line = raised.value.code  # the interpreter prints a str code as the last line and exits 1
        assert isinstance(line, str) and "\n" not in line and "Traceback" not in capsys.readouterr().err
    assert line == f"run_vit.py: error: --profile {text}: {says}"
    assert not (tmp_path / "run").exists()


def test_the_bare_flag_is_the_default_schedule_after_the_warmup():
    assert profiling.complete(profiling.schedule("{}"), warmup_steps=3) == {
        "wait": 3,
        "warmup": 1,
        "active": 3,
    }
    assert profiling.complete({"wait": 0, "active": 2}, warmup_steps=3) == {
        "wait": 0,
        "warmup": 1,
        "active": 2,
    }


def test_without_holistic_trace_analysis_the_gpu_summary_says_why(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "hta", None)
    assert profiling.hta_summary(tmp_path).startswith("unavailable (HolisticTraceAnalysis is not installed")


def test_operators_fall_into_categories_by_their_names():
    assert [
        profiling.category(name)
        for name in (
            "aten::addmm",
            "aten::_scaled_dot_product_flash_attention",
            "Optimizer.step#AdamW.step",
            "nccl:all_reduce",
            "aten::native_layer_norm",
            "aten::copy_",
            "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            "aten::gelu",
        )
    ] == [
        "matmul",
        "attention",
        "optimizer",
        "communication",
        "normalization",
        "data movement",
        "data loading",
        "elementwise",
    ]


def test_holistic_trace_analysis_summarizes_a_gpu_trace_where_it_is_installed(tmp_path):
    pytest.importorskip("hta")
    # The smallest trace of a GPU step HTA reads: a launch on the host, a GEMM and an NCCL kernel on
    # the device (1000 us and 500 us of a 1700 us span), rank 0 named as PyTorch's distributed traces do.
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 1000, "dur": 3000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1150, "dur": 10,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm_kernel", "pid": 0, "tid": 7, "ts": 1200, "dur": 1000,
         "args": {"stream": 7, "device": 0, "correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2310, "dur": 10,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 2400, "dur": 500, "args": {"stream": 7, "device": 0, "correlation": 8}},
    ]  # fmt: skip
    trace = {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": events}
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    found = profiling.hta_summary(tmp_path)
    assert found["kernel_types"] == [
        {"kernel_type": "COMPUTATION", "us": 1000.0, "pct": 66.7},
        {"kernel_type": "COMMUNICATION", "us": 500.0, "pct": 33.3},
    ]
    (temporal,) = found["temporal_breakdown"]
    assert temporal["rank"] == 0 and temporal["compute_pct"] + temporal["non_compute_pct"] + temporal[
        "idle_pct"
    ] == pytest.approx(100, abs=0.1)
