"""A fake trainer for the kit's tests: writes the run-directory contract (reprokit_trainers/contract.json)
in milliseconds and without torch. The recipe's real hyperparameters are accepted and ignored;
the --fake_* arguments (a test recipe's variant args) choose what it does."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
import time
from pathlib import Path

from reprokit_trainers.common.record import summaryschema
from reprokit_trainers.common.record.contract import SCHEMA_VERSION

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


def write_json_atomic(path: Path, payload: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_events(folder: Path, rows: list[dict]) -> None:
    """TensorBoard scalars, written with tensorboard's own writer (no torch) when it is installed."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        return
    writer = EventFileWriter(str(folder / "throughput"))
    for row in rows:
        values = [
            summary_pb2.Summary.Value(
                tag="throughput/samples_per_second", simple_value=row["samples_per_second"]
            ),
            summary_pb2.Summary.Value(tag="throughput/loss", simple_value=row["loss"]),
        ]
        writer.add_event(
            event_pb2.Event(
                step=row["step"], wall_time=time.time(), summary=summary_pb2.Summary(value=values)
            )
        )
    writer.close()


def explain(out: Path, args: argparse.Namespace) -> dict:
    """summary.json's explaining fields as the real trainers write them (common/measure/breakdown.py, energy.py,
    profiling.py), from the --fake_* values; with --profile, a Chrome trace of the schedule's steps."""
    fields: dict = {"energy": "unavailable (fake trainer: no energy source)"}
    if args.fake_data_wait is not None:
        shares = {"data_wait": args.fake_data_wait, "compute": round(0.98 - args.fake_data_wait, 4),
                  "communication": None, "other": 0.02}  # fmt: skip
        fields["breakdown"] = {**shares, "window_s": 0.04, "steps": 4, "basis": "host clock"}
    if args.fake_samples_per_joule is not None:
        joules = 16 / args.fake_samples_per_joule
        fields.update(
            energy={"source": "RAPL", "method": "package energy counters", "of": "CPU package-0 (fake)"},
            energy_joules=joules, samples_per_joule=args.fake_samples_per_joule, power_mean_w=joules / 0.04,
        )  # fmt: skip
    if args.profile is not None:
        import gzip

        plan = json.loads(args.profile)
        first = plan["wait"] + plan["warmup"] + 1
        steps = list(range(first, first + plan["active"]))
        events = [{"ph": "X", "name": f"ProfilerStep#{n}", "ts": n * 1000, "dur": 900, "pid": 1, "tid": 1}
                  for n in steps]  # fmt: skip
        (out / "profile").mkdir(exist_ok=True)
        (out / "profile" / "rank0.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps({"traceEvents": events}).encode())
        )
        fields["profile"] = {
            "schedule": plan,
            "steps": [steps[0], steps[-1]],
            "trace": "profile/rank0.pt.trace.json.gz",
        }
    return fields


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--fake_rate", type=float, default=100.0, help="samples/s to report")
    parser.add_argument("--fake_steps", type=int, default=6)
    parser.add_argument("--fake_crash", default=None, help="die with this error after two steps")
    parser.add_argument("--fake_hang", action="store_true", help="hang until stopped")
    parser.add_argument("--fake_hang_once", default=None, help="hang unless this marker file exists; make it")
    parser.add_argument("--fake_tensorboard", action="store_true")
    parser.add_argument(
        "--fake_linger", type=float, default=0.0, help="stay alive this long after writing summary.json"
    )
    parser.add_argument(
        "--data_dir", default=None, help="real data: what the trainer finds there is recorded"
    )
    parser.add_argument("--fake_data_wait", type=float, default=None, help="the window's share spent on data")
    parser.add_argument("--fake_samples_per_joule", type=float, default=None, help="samples/J to report")
    parser.add_argument("--profile", default=None, help="a schedule: write a trace of its active steps")
    parser.add_argument(
        "--fake_ignore_term", action="store_true", help="ignore SIGTERM (a trainer that will not stop)"
    )
    parser.add_argument(
        "--fake_fill", action="store_true", help="after two steps, write until the disk is full"
    )
    parser.add_argument(
        "--fake_kill_self", action="store_true", help="after a progress bar's line, SIGKILL itself"
    )
    parser.add_argument("--fake_departure", default=None, help="record this throughput departure")
    parser.add_argument(
        "--fake_rate_by_device",
        default=None,
        help="DEVICE=RATE,...: the rate on the device CUDA_VISIBLE_DEVICES shows it (a slow GPU's run)",
    )
    parser.add_argument(
        "--fake_crash_on_device", default=None, help="crash as --fake_crash on this visible device"
    )
    parser.add_argument(
        "--fake_fill_after",
        default=None,
        help="after the summary, fill the disk with this file (someone else's)",
    )
    args, _ = parser.parse_known_args()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if args.fake_rate_by_device and visible is not None:
        rates = dict(item.split("=") for item in args.fake_rate_by_device.split(","))
        args.fake_rate = float(rates.get(visible, args.fake_rate))
    if args.fake_crash_on_device is not None and visible == args.fake_crash_on_device:
        args.fake_crash = f"device {visible} fell off the bus"
    if args.fake_ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tensorboard").mkdir(exist_ok=True)
    (out / "fake.pid").write_text(str(os.getpid()))
    # Exactly what it was started with: what a rendered script passed, word for word.
    write_json_atomic(out / "argv.json", {"argv": sys.argv[1:], "CUDA_VISIBLE_DEVICES": visible})
    print(f"fake trainer: {' '.join(sys.argv[1:4])} ...", flush=True)
    if args.data_dir:
        found = sorted(
            str(p.relative_to(args.data_dir)) for p in Path(args.data_dir).rglob("*") if p.is_file()
        )
        write_json_atomic(out / "seen_data.json", {"data_dir": args.data_dir, "files": found})
    write_json_atomic(
        out / "sysinfo.json",
        {
            "started_at": time.strftime(TIME_FORMAT),
            "device_type": "cpu",
            "device_name": "Fake CPU",
            "device_count": 1,
            "world_size": 1,
            "num_nodes": 1,
            "image_id": "sha256:" + "f" * 64,
            "versions": {"torch": "2.14.1", "transformers": "4.49.0", "timm": None},
        },
    )
    rows = []
    with open(out / "throughput.csv", "w", newline="") as fh:
        writer = csv.DictWriter(
            fh, ["step", "epoch", "elapsed_s", "samples", "samples_per_second", "loss", "learning_rate"]
        )
        writer.writeheader()
        for step in range(1, args.fake_steps + 1):
            if args.fake_fill and step == 3:
                with open(out / "checkpoint.bin", "wb") as blob:  # a checkpoint bigger than the disk
                    while True:
                        blob.write(b"\0" * 65536)
                        blob.flush()
            if args.fake_kill_self and step == 3:
                print(" 50%|█████     | 3/6 [00:01<00:01,  2.95it/s]", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if args.fake_crash and step == 3:
                fh.flush()
                print("Traceback (most recent call last):", file=sys.stderr)
                print('  File "fake_trainer.py", line 1, in <module>', file=sys.stderr)
                print(f"RuntimeError: {args.fake_crash}", file=sys.stderr, flush=True)
                return 3
            row = {
                "step": step,
                "epoch": round(step / args.fake_steps, 4),
                "elapsed_s": round(step * 0.01, 4),
                "samples": 4,
                "samples_per_second": args.fake_rate * (0.9 + 0.02 * step),
                "loss": 2.0 / step,
                "learning_rate": 1e-5,
            }
            writer.writerow(row)
            rows.append(row)
            fh.flush()
    if args.fake_tensorboard:
        write_events(out / "tensorboard", rows)
    hang = args.fake_hang
    if args.fake_hang_once:
        marker = Path(args.fake_hang_once)
        hang = not marker.exists()
        marker.touch()
    while hang:  # until the kit stops it (a timeout, an interrupt)
        time.sleep(0.05)
    explained = explain(out, args)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "unit": "samples/s",
        "samples_per_second": args.fake_rate,
        "throughput": {
            "after_warmup": {"value": args.fake_rate, "samples": 4 * (args.fake_steps - 2)},
            "whole_run": {"value": args.fake_rate * 0.9, "samples": 4 * args.fake_steps},
        },
        "departures": [{"reason": args.fake_departure, "kind": "throughput"}] if args.fake_departure else [],
        # A fake runs whatever software its cell expects (cell.json, written by the host).
        "software": json.loads((out / "cell.json").read_text()).get("software", {})
        if (out / "cell.json").exists()
        else {},
        "warmup_steps": 2,
        "steps": args.fake_steps,
        "samples": 4 * args.fake_steps,
        "measured_samples": 4 * (args.fake_steps - 2),
        "train_runtime_s": 0.06,
        "world_size": 1,
        "num_nodes": 1,
        "peak_memory_bytes": 123 * 2**20,
        "peak_memory_of": "host resident set",
        "peak_memory_device_bytes": None,
        "peak_memory_device_of": None,
        "machine_load": None,
        "stalls": {"median_step_s": 0.01, "found": [], "rule": "fake trainer: none"},
        "breakdown": None,
        "step_time_s": None,
        "finished_at": time.strftime(TIME_FORMAT),
        **explained,
    }
    # Typed as a real trainer's summary is, by the schema the host reads it with.
    wrong = summaryschema.problem(summary, summaryschema.load())
    if wrong:
        raise SystemExit(f"fake trainer: summary.json: {wrong}")
    write_json_atomic(out / "summary.json", summary)
    if args.fake_fill_after:
        # Someone else's file fills the results folder's disk once this run has measured.
        try:
            with open(Path(args.fake_fill_after), "wb") as blob:
                while True:
                    blob.write(b"\0" * 4096)
                    blob.flush()
        except OSError:
            pass
    # A real trainer still tears down (process groups, loader workers) after its last write.
    time.sleep(args.fake_linger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
