"""`python -m reprokit.barenode {bundle,verify,rehearse,run}`: the kit on a bare GPU node.

    bundle    here, with PyPI: the wheels the node lacks, for its Python and platform, and a manifest
    verify    a bundle's files against its manifest's hashes
    rehearse  here, on the CPU: every cell of the slices at its published size (a fake device counts
              its memory), held against an 80 GB device
    run       on the node, started by scripts/barenode/run.py once the bundle is installed: a slice

README.md, "On a bare GPU node", gives the commands in order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reprokit.barenode import slices, wheels
from reprokit.barenode.node import NODE_FILE
from reprokit.contract.errors import ReprokitError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m reprokit.barenode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    bundle = commands.add_parser("bundle", help="make the bundle of wheels the node lacks (needs PyPI)")
    bundle.add_argument(
        "out", type=Path, nargs="?", default=Path("node-bundle"), help="its folder (default node-bundle)"
    )
    bundle.add_argument(
        "--node", type=Path, default=NODE_FILE, help="the node's description (default: node.yaml)"
    )
    bundle.add_argument(
        "--python-version", help="the node's Python, e.g. 3.12 (default: the node's description)"
    )
    bundle.add_argument("--platform", help="the node's wheel platform (default: the node's description)")
    verify = commands.add_parser("verify", help="check a bundle's wheels against its manifest")
    verify.add_argument("bundle", type=Path, nargs="?", default=Path("node-bundle"))
    rehearse = commands.add_parser("rehearse", help="rehearse the slices' cells on the CPU")
    rehearse.add_argument("slices", nargs="*", help="slice names (default: all)")
    rehearse.add_argument("--slices-file", type=Path, default=slices.SLICES_FILE)
    rehearse.add_argument(
        "--keep", type=Path, help="keep the rehearsal's folder here (default: a temporary one)"
    )
    rehearse.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="rehearsals at once, each taking whole trainers (default: one per trainer, at most 4 and one per core)",
    )
    run = commands.add_parser("run", help="run a slice on this node (scripts/barenode/run.py starts it)")
    run.add_argument("slice")
    run.add_argument("--out", type=Path, required=True, help="what comes back: rows, checks, log, archive")
    run.add_argument("--scratch", type=Path, required=True, help="session, synthetic data, checkpoints")
    run.add_argument(
        "--budget-s", type=float, required=True, help="the run's wall time, from the node command's start"
    )
    run.add_argument("--slices-file", type=Path, default=slices.SLICES_FILE)
    run.add_argument("--accelerator", default="cuda", help="what the cells are planned for (default cuda)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "bundle":
            manifest = wheels.build(args.out, args.node, args.python_version, args.platform)
            for entry in manifest["wheels"]:
                print(f"  {entry['file']}  {entry['bytes'] / 2**20:.1f} MiB  ({entry['why']})")
            size = wheels.bundle_bytes(args.out)
            print(
                f"Bundle: {args.out} ({len(manifest['wheels'])} wheels, {size / 2**20:.1f} MiB of the "
                f"{wheels.LIMIT_BYTES / 2**20:.0f} MiB that travel) for Python {manifest['node']['python']} "
                f"on {manifest['node']['platform']}"
            )
            return 0
        if args.command == "verify":
            problems = wheels.verify(args.bundle)
            for problem in problems:
                print(problem, file=sys.stderr)
            if not problems:
                print(f"{args.bundle}: every wheel matches its manifest's sha256")
            return 1 if problems else 0
        if args.command == "rehearse":
            from reprokit.barenode import rehearsal

            names = args.slices or list(slices.load(args.slices_file).slices)
            rehearsal.rehearse(names, args.keep, args.slices_file, jobs=args.jobs)
            return 0
        from reprokit.barenode import runner

        return runner.run(
            args.slice, args.out, args.scratch, args.budget_s, args.slices_file, args.accelerator
        )
    except ReprokitError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
