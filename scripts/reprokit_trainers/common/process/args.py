"""Command lines of the trainers: dataclasses parsed by HfArgumentParser, errors in one line.

A configuration problem ends the trainer with one line, ``<prog>: error: <what is wrong>`` (argparse's
own wording), before anything heavy starts and without a traceback: the kit shows the last line of
a failed run's log as its cause. ``<prog>`` is the published script's name (``run_volo.py``), also
when the trainer runs as ``python -m reprokit_trainers.volo``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser

from reprokit_trainers.common.measure import profiling
from reprokit_trainers.common.process import argschema


def arg(default: Any, help_text: str | None = None) -> Any:
    """A trainer's command-line argument as a dataclass field: its default and its ``--help`` text."""
    return field(default=default, metadata={} if help_text is None else {"help": help_text})


@dataclass
class ProfileArguments:
    """--profile: trace a few steps with torch.profiler (profiling.py)."""

    profile: str | None = field(
        default=None,
        metadata={
            "help": "trace steps with torch.profiler into profile/ (Kineto JSON, gzipped): a JSON schedule "
            '{"wait": W, "warmup": N, "active": A} in steps; the bare flag traces 3 steps after the '
            "throughput warm-up and one more",
            # The bare flag is the default schedule; the host writes the whole schedule as JSON.
            "nargs": "?",
            "const": "{}",
        },
    )

    def __post_init__(self) -> None:
        profiling.schedule(self.profile)  # a schedule that is not one: ValueError, one line


@dataclass
class MfuArguments(ProfileArguments):
    """What every trainer's parser includes to report its model FLOPs utilization (flops.py), and
    (ProfileArguments) to trace steps on request."""

    device_peak_tflops: float | None = field(
        default=None,
        metadata={
            "help": "the device's peak TFLOP/s for MFU, e.g. a measured bf16 matmul rate "
            "(default: the datasheet's dense bf16/fp16 peak of a known GPU; none on CPUs)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.device_peak_tflops is not None and not self.device_peak_tflops > 0:
            raise ValueError(f"--device_peak_tflops {self.device_peak_tflops}: a peak is a positive TFLOP/s")


def arguments_dict(*parsed: Any) -> dict[str, Any]:
    """Every argument of a run, from its parsed dataclasses: what summary.json records as ``args``."""
    return {name: value for arguments in parsed for name, value in asdict(arguments).items()}


@dataclass
class DeviceArguments(MfuArguments):
    """MFU's device peak and TF32, for the explicit loops (BridgeTower's TrainingArguments has its own
    --tf32, set the same way through precision.set_tf32)."""

    tf32: bool | None = field(
        default=None,
        metadata={
            "help": "TF32 matmuls and convolutions on (true) or off (false), set explicitly and recorded "
            "in sysinfo.json; unset leaves the framework's default (NGC images: on)",
            # HfArgumentParser wants a value after an optional bool; the host writes a true one as the
            # bare flag (--tf32), as for every other bool.
            "nargs": "?",
            "const": True,
        },
    )


def take_bool_flag(argv: Sequence[str], name: str) -> tuple[list[str], bool | None]:
    """``argv`` without ``--name`` (bare: true, the host's way to write a true bool; or with a value),
    and the value it gave (None where absent)."""
    rest: list[str] = []
    value: bool | None = None
    tokens = list(argv)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == f"--{name}" or token.startswith(f"--{name}="):
            given = token.partition("=")[2] if "=" in token else None
            if given is None and index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
                index += 1
                given = tokens[index]
            value = True if given is None else given.lower() in ("true", "1", "yes", "y")
        else:
            rest.append(token)
        index += 1
    return rest, value


def config_error(prog: str, message: str) -> SystemExit:
    """The exception a configuration problem ends the trainer with: raise it ``from None``."""
    return SystemExit(f"{prog}: error: {message}")


@contextmanager
def one_line_errors(prog: str, *kinds: type[BaseException]) -> Iterator[None]:
    """Turn the configuration errors ``kinds`` raised inside the block into one line."""
    try:
        yield
    except kinds as problem:
        raise config_error(prog, str(problem)) from None


def parse_command_line(
    prog: str,
    dataclass_types: Sequence[type],
    argv: Sequence[str] | None = None,
    trainer_dir: str | Path | None = None,
) -> tuple[Any, ...]:
    """One instance of each dataclass, from ``argv`` (default: the command line).

    argparse's own errors (an unknown flag, a bad value) print the usage and exit 2, as any
    HfArgumentParser script does; a dataclass's own checks (``__post_init__``, e.g.
    TrainingArguments' ``--bf16`` where nothing supports it) end in one line, and so does a value
    outside the trainer's argument schema (``trainer_dir``/arguments.json: the ranges and choices the
    host checks a recipe with before it launches anything).
    """
    parser = HfArgumentParser(dataclass_types, prog=prog)
    with one_line_errors(prog, ValueError):
        parsed = tuple(parser.parse_args_into_dataclasses(args=argv))
    if trainer_dir is not None:
        values: dict[str, Any] = {}
        for instance in parsed:
            values.update(asdict(instance))
        problems = argschema.check(argschema.load(trainer_dir), values, only_known=True)
        if problems:
            raise config_error(prog, f"--{problems[0]}")
    return parsed


def given(argv: Sequence[str], name: str) -> bool:
    """Whether the command line set ``--name`` itself (as ``--name V`` or ``--name=V``)."""
    return any(a == f"--{name}" or a.startswith(f"--{name}=") for a in argv)


def check_sizes(config: Any, names: Sequence[str], where: str = "") -> None:
    """Each of ``names`` that ``config`` has is a whole number of at least 1, or ValueError naming it
    (``where``: the part of the config, e.g. "text_config."): an architecture's zero or text ended deep in
    the model's code (an IndexError, a division by zero, a matmul of no width) rather than in one line."""
    for name in names:
        value = getattr(config, name, 1)
        if not is_size(value):
            raise ValueError(f"{where}{name} {value!r}: give a whole number of at least 1")


def is_size(value: Any) -> bool:
    """A whole number of at least 1 (not a bool, which is an int to Python, nor a text)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def first_line(error: BaseException) -> str:
    """An exception's first line (its type where it says nothing), at most 300 characters."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def without_fields_of(arguments: type, taken: type) -> type:
    """The dataclass ``arguments`` minus the fields ``taken`` defines (HfArgumentParser rejects
    duplicates: GaudiTrainingArguments defines some of a trainer's benchmark flags itself)."""
    taken_names = {f.name for f in dataclasses.fields(taken)}
    hints = typing.get_type_hints(arguments)
    kept = [(f.name, hints[f.name], f) for f in dataclasses.fields(arguments) if f.name not in taken_names]
    if len(kept) == len(dataclasses.fields(arguments)):
        return arguments
    return dataclasses.make_dataclass(arguments.__name__, kept)
