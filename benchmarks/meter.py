"""What measuring costs: a real small training loop on the CPU, run with the kit's meter on and off.

On: steps go through StepLogger as the VOLO and ViT trainers' do: each batch's wait and each step's
time kept for the breakdown, a throughput.csv row and TensorBoard scalars every 10 steps (the
published BridgeTower logging interval), the energy meter's thread where this machine has an energy
source. Off: the same steps, bare. One model trains through pairs of steps, one on and one off (in
turn first), in one process; each kind's figure is its samples over its steps' CPU seconds (all the
process's threads, so the TensorBoard writer's and the energy meter's count too). CPU time, not wall
time, and neighbouring steps paired: on a machine shared with other work the wall clock moves by
several percent with the others' load. The ratio on/off comes with a 95% interval from resampling
the pairs (what the machine's noise allows to be said), and beside it the meter's own cost measured
alone, per step and per logged step. The meter must not change what it measures by more than 1%.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

PAIRS, LOGGING, BATCH, SIZE = 500, 10, 32, 64
LIMIT = 0.01  # the largest change of the measured figure the meter may cause


def _setup(steps: int):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 16, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(
        torch.randn(steps * BATCH, 3, SIZE, SIZE), torch.randint(0, 10, (steps * BATCH,))
    )
    return model, optimizer, iter(torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=0))


def _step(model, optimizer, batch):
    import torch.nn.functional as F

    images, labels = batch
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def _logger(folder: Path, warmup: int):
    from reprokit_trainers.common.measure.steps import StepLogger
    from reprokit_trainers.common.record.rundir import RunDir

    return StepLogger(RunDir(folder), warmup_steps=warmup, global_batch=BATCH, logging_steps=LOGGING)


def alternating(pairs: int) -> tuple[list[float], list[float]]:
    """CPU seconds of each off step and each on step, in pairs."""
    import torch

    torch.set_num_threads(1)  # two shared cores: one thread steadies the step time
    model, optimizer, batches = _setup(2 * pairs + 10)
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as scratch:
        logger = _logger(Path(scratch), warmup=LOGGING)
        timed = logger.batches(batches)  # the on steps fetch through the meter, the off ones bare
        for batch in itertools.islice(batches, 10):  # warm-up: allocations
            _step(model, optimizer, batch)
        step, held = 0, {}
        for pair in range(pairs):
            for kind in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                start = time.process_time()
                # Each side keeps its last batch until it fetches the next, as a loop's variable does.
                held[kind] = next(timed if kind == "on" else batches)
                loss = _step(model, optimizer, held[kind])
                if kind == "on":
                    step += 1
                    logger.step(step, 0.0, 1e-3, loss)
                seconds[kind].append(time.process_time() - start)
        logger.close()
    return seconds["off"], seconds["on"]


def own_cost(steps: int = 20_000) -> tuple[float, float]:
    """The meter's CPU seconds per step and per logged step, on a loop that does nothing else."""
    import torch

    loss = torch.tensor(1.0)
    found = []
    for logging in (10**9, LOGGING):
        with tempfile.TemporaryDirectory() as scratch:
            logger = _logger(Path(scratch), warmup=5)
            logger.logging_steps = logging
            start = time.process_time()
            for step, _ in enumerate(logger.batches(range(steps)), start=1):
                logger.step(step, 0.0, 1e-3, loss)
            found.append((time.process_time() - start) / steps)
            logger.close()
    per_step, with_rows = found
    return per_step, (with_rows - per_step) * LOGGING


def _ratio(off: list[float], on: list[float]) -> float:
    return sum(off) / sum(on)  # equal samples per block: the ratio of rates is that of seconds


def measure(pairs: int = PAIRS) -> list[dict]:
    # The logger prints a line per logged step, as in a run (whose lines go to a log file).
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        off, on = alternating(pairs)
        per_step, per_row = own_cost()
    ratio = _ratio(off, on)
    draw = random.Random(0)
    resampled = sorted(
        _ratio(*zip(*(draw.choice(list(zip(off, on, strict=True))) for _ in off), strict=True))
        for _ in range(2000)
    )
    low, high = resampled[50], resampled[-51]
    step_s = sum(off) / len(off)
    return [
        {
            "suite": "meter",
            "name": f"meter {kind}",
            "samples_per_cpu_s": len(seconds) * BATCH / sum(seconds),
            "step_ms": 1e3 * sum(seconds) / len(seconds),
            "steps": len(seconds),
            "ratio_on_off": ratio if kind == "on" else 1.0,
            "interval_95": f"{low:.4f}-{high:.4f}" if kind == "on" else "",
            "own_us_per_step": 1e6 * per_step if kind == "on" else None,
            "own_us_per_logged_step": 1e6 * per_row if kind == "on" else None,
            "own_share": (per_step + per_row / LOGGING) / step_s if kind == "on" else None,
            "load_average": round(os.getloadavg()[0], 2),
        }
        for kind, seconds in (("off", off), ("on", on))
    ]


def verdict(rows: list[dict]) -> str:
    """The headline: the ratio, whether it is within 1%, and how sure this machine lets one be."""
    on = next(r for r in rows if r["name"] == "meter on")
    low, high = (float(x) for x in on["interval_95"].split("-"))
    if low >= 1 - LIMIT:
        within = f"within {LIMIT:.0%}"
    elif on["ratio_on_off"] >= 1 - LIMIT:
        within = f"within {LIMIT:.0%}; this machine's noise leaves the interval below it"
    else:
        within = f"OUTSIDE {LIMIT:.0%}"
    return (
        f"meter overhead: on/off {on['ratio_on_off']:.4f} in samples per CPU-second ({within}; 95% interval "
        f"{on['interval_95']} over {on['steps']} pairs of steps, load {on['load_average']}); the meter's own cost "
        f"alone: {on['own_us_per_step']:.1f} us a step and {on['own_us_per_logged_step']:.0f} us a logged step, "
        f"{on['own_share']:.3%} of this loop's {on['step_ms']:.0f} ms steps"
    )


# --- the meter on a multi-bucket DDP run -------------------------------------------------------------
#
# Two CPU processes (gloo) train the same 48-layer model in DDP with a bucket cap that makes 48
# buckets, three ways in turn on each round: bare (off); through the meter as a trainer runs it (on:
# StepLogger, its breakdown reading DDP's reducer timers every step); and, for reference, with the
# per-bucket Python communication hook the breakdown used before (hook: a Python callback on every
# bucket's all-reduce, reading the clock as it starts and ends). Each kind is its own DDP model of the
# same weights; both ranks run the same sequence of steps. CPU seconds of the whole process per step,
# rank 0's, paired by round: the median of each round's off/on ratio, with a 95% interval.

DDP_LAYERS, DDP_WIDTH, DDP_BATCH, DDP_ROUNDS = 48, 256, 32, 300
DDP_BUCKET_MB = DDP_WIDTH * (DDP_WIDTH + 1) * 4 / 2**20  # one layer's gradients: 48 buckets
DDP_KINDS = ("off", "on", "hook")


def _ddp_rank(rank: int, store_path: str, rounds: int, out: str) -> None:
    import json

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        layers = [torch.nn.Linear(DDP_WIDTH, DDP_WIDTH) for _ in range(DDP_LAYERS)]
        return torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(*layers), bucket_cap_mb=DDP_BUCKET_MB
        )

    models = {kind: model() for kind in DDP_KINDS}
    models["hook"].register_comm_hook(None, _timing_hook([]))
    optimizers = {kind: torch.optim.SGD(m.parameters(), lr=1e-4) for kind, m in models.items()}
    data = torch.randn(DDP_BATCH, DDP_WIDTH, generator=torch.Generator().manual_seed(rank))
    seconds: dict[str, list[float]] = {kind: [] for kind in DDP_KINDS}
    with (
        tempfile.TemporaryDirectory() as scratch,
        open(os.devnull, "w") as sink,
        contextlib.redirect_stdout(sink),
    ):
        logger = _logger(Path(scratch) / f"rank{rank}", warmup=LOGGING)
        logger.watch(models["on"], every_step=True)
        batches = iter(logger.batches(itertools.repeat(data)))
        step = 0
        for round_ in range(rounds + 5):  # 5 rounds of warm-up: buckets rebuilt, allocations made
            order = DDP_KINDS[round_ % 3 :] + DDP_KINDS[: round_ % 3]
            for kind in order:
                start = time.process_time()
                batch = next(batches) if kind == "on" else data
                loss = models[kind](batch).pow(2).mean()
                optimizers[kind].zero_grad(set_to_none=True)
                loss.backward()
                optimizers[kind].step()
                if kind == "on":
                    step += 1
                    logger.step(step, 0.0, 1e-4, loss)
                if round_ >= 5:
                    seconds[kind].append(time.process_time() - start)
        logger.close()
        buckets = models["on"]._get_ddp_logging_data().get("num_buckets_reduced")
        timed = logger.meter.breakdown.communication
        # What the meter adds to a DDP step alone: reading the reducer's figure (the rest of its
        # per-step cost is own_cost()'s, the same with or without DDP).
        start = time.process_time()
        for _ in range(2000):
            logger.meter.breakdown._read_ddp()
        read_s = (time.process_time() - start) / 2000
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"seconds": seconds, "buckets": buckets, "timed": timed, "read_s": read_s}, fh)
    dist.barrier()
    os._exit(0)  # gloo's teardown beside a peer can abort it; the figures are written


def _timing_hook(spans: list) -> object:
    """A communication hook as the breakdown had it: DDP's all-reduce, a clock read as each bucket's
    starts and as it ends (a Python callback per bucket)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(process_group, bucket):  # noqa: ANN001, ANN202 -- DDP refuses annotated hooks
        span = [time.perf_counter(), None]
        spans.append(span)

        def done(future):  # noqa: ANN001, ANN202
            span[1] = time.perf_counter()
            del spans[:-64]
            return future.value()

        return allreduce_hook(process_group, bucket).then(done)

    return hook


def ddp_measure(rounds: int = DDP_ROUNDS) -> list[dict]:
    """The meter's cost on two DDP processes: on/off and hook/off with 95% intervals (rank 0)."""
    import json

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "rank0.json"
        mp.spawn(_ddp_rank, args=(str(Path(scratch) / "store"), rounds, str(out)), nprocs=2, join=True)
        found = json.loads(out.read_text())
    seconds = found["seconds"]
    draw = random.Random(0)
    rows = []
    for kind in DDP_KINDS:
        off, mine = seconds["off"], seconds[kind]
        # Per round, off over this kind; their median, which a neighbour's burst of load on a shared
        # machine moves less than a sum (two processes of two threads on two cores).
        per_round = [a / b for a, b in zip(off, mine, strict=True)]
        resampled = sorted(statistics.median(draw.choices(per_round, k=len(per_round))) for _ in range(2000))
        rows.append(
            {
                "suite": "meter-ddp",
                "name": f"ddp {kind}",
                "processes": 2,
                "buckets": found["buckets"],
                "step_ms": 1e3 * sum(mine) / len(mine),
                "steps": len(mine),
                "ratio_on_off": statistics.median(per_round),
                "interval_95": f"{resampled[50]:.4f}-{resampled[-51]:.4f}",
                "communication_timed": found["timed"] if kind == "on" else "",
                "own_us_per_step": 1e6 * found["read_s"] if kind == "on" else None,
                "own_share": found["read_s"] / (sum(off) / len(off)) if kind == "on" else None,
                "load_average": round(os.getloadavg()[0], 2),
            }
        )
    return rows


def ddp_verdict(rows: list[dict]) -> str:
    """The headline of the DDP run: the meter's ratio, within 1% or not, and the hook's beside it."""
    by_name = {r["name"]: r for r in rows}
    on, hook = by_name["ddp on"], by_name["ddp hook"]
    low = float(on["interval_95"].split("-")[0])
    within = (
        f"within {LIMIT:.0%}"
        if low >= 1 - LIMIT
        else f"within {LIMIT:.0%}; this machine's noise leaves the interval below it"
        if on["ratio_on_off"] >= 1 - LIMIT
        else f"OUTSIDE {LIMIT:.0%}"
    )
    return (
        f"meter overhead, DDP over 2 processes and {on['buckets']} buckets: on/off {on['ratio_on_off']:.4f} ({within}; "
        f"95% interval {on['interval_95']} over {on['steps']} rounds of {on['step_ms']:.0f} ms steps, load "
        f"{on['load_average']}), communication timed by {on['communication_timed']}; reading the reducer's "
        f"figure costs {on['own_us_per_step']:.1f} us a step alone, {on['own_share']:.3%} of the step; a per-bucket "
        f"Python hook (the former way): {hook['ratio_on_off']:.4f} (interval {hook['interval_95']})"
    )
