"""Read optimum-habana's committed BridgeTower-large CI baselines, release by release, from its history.

    git clone https://github.com/huggingface/optimum-habana /path/to/optimum-habana
    python recipes/bridgetower/conformance/read_bridgetower_baselines.py --optimum-habana /path/to/optimum-habana
    python recipes/bridgetower/conformance/read_bridgetower_baselines.py --optimum-habana /path/to/optimum-habana --check

Standard library and git only. It prints each figure the history committed (8 Gaudi cards, batch 48,
workers 2, mediapipe: the CI's MultiCardBridgetowerExampleTester, GaudiTrainer's train samples/s), with
its commit, date and the release it was measured on, as the recipe's references write them; `--check`
holds recipes/bridgetower/recipe.yaml's optimum-habana references to them (exit 1 on any difference).

Where the figures are: tests/baselines/bridgetower_large_itm_mlm_itc.json (2023-08 to 2025-03, its
`gaudi2` key from 2023-11 on), then tests/baselines/fixture/tests/test_examples.json (one key per
test, `gaudi2` and `gaudi3`). A figure counts where a commit changed it; it is left out, saying why,
where it is no BridgeTower measurement:
- copied: the value stood in another baseline file the commit copied (the file's first version is a
  copy of wav2vec2_base.json, its numbers included, while the BridgeTower test was still commented out);
- a placeholder: one device's entry equal to another's in the same commit (Gaudi3's first entry).

The release: the repository states no measurement environment beside a baseline. What it does state
at the commit is the Gaudi software its CI ran: the `vault.habana.ai/gaudi-docker/<version>/` images of
.github/workflows (every workflow on one version at each of these commits, which the script checks),
and the optimum-habana version (`optimum/habana/version.py`, a .dev0 of the next release) with the
first release tag that holds the commit. A commit whose workflows name no image, or several versions,
gets `unknown`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

OLD = "tests/baselines/bridgetower_large_itm_mlm_itc.json"
FIXTURE = "tests/baselines/fixture/tests/test_examples.json"
TEST_KEY = "MultiCardBridgetowerExampleTester"
IMAGE = re.compile(r"gaudi-docker/([0-9]+\.[0-9]+\.[0-9]+)/")
METRIC = "train_samples_per_second"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def history(repo: Path, path: str, follow: bool) -> list[tuple[str, str, str]]:
    """(commit, date, the file's path there), oldest first: every commit that touched the file."""
    flags = ["--follow"] if follow else []
    out = git(repo, "log", *flags, "--name-only", "--format=@%H %cs", "--", path)
    found, commit = [], None
    for text in out.splitlines():
        if text.startswith("@"):
            commit = text[1:].split()
        elif text.strip() and commit:
            found.append((commit[0], commit[1], text.strip()))
            commit = None
    return found[::-1]


def figures_in(data: dict) -> dict[str, float]:
    """The file's BridgeTower train samples/s by Gaudi generation (`gaudi` where the file names none)."""
    if any(TEST_KEY in key for key in data):
        entry = next(v for k, v in data.items() if TEST_KEY in k)
        return {device: float(v[METRIC]) for device, v in entry.items() if METRIC in v}
    tree = (
        {"gaudi": data} if "gaudi2" not in data else {k: v for k, v in data.items() if k.startswith("gaudi")}
    )
    found = {}
    for device, tasks in tree.items():
        for task in tasks.values():
            multi = task.get("distribution", {}).get("multi_card", {})
            if METRIC in multi:
                found[device] = float(multi[METRIC])
    return found


def synapse(repo: Path, commit: str) -> str:
    try:
        out = git(repo, "grep", "-h", "-o", "-E", IMAGE.pattern, commit, "--", ".github")
    except subprocess.CalledProcessError:  # no image named
        return "unknown"
    versions = sorted(set(IMAGE.findall(out)))
    return versions[0] if len(versions) == 1 else "unknown"


def release(repo: Path, commit: str) -> dict[str, str]:
    version = re.search(r'__version__ = "([^"]+)"', git(repo, "show", f"{commit}:optimum/habana/version.py"))
    tags = [
        t
        for t in git(repo, "tag", "--contains", commit, "--sort=creatordate").split()
        if re.fullmatch(r"v\d+(\.\d+)+", t)
    ]
    return {
        "synapse": synapse(repo, commit),
        "optimum_habana": version.group(1) if version else "unknown",
        "first_release": tags[0] if tags else "unknown",
    }


def copied(repo: Path, commit: str, path: str, value: float) -> str | None:
    """The other baseline file that held `value` before `commit`, if any."""
    parent = git(repo, "rev-parse", f"{commit}^").strip()
    text = json.dumps(value)
    try:
        out = git(repo, "grep", "-l", "-F", text, parent, "--", "tests/baselines")
    except subprocess.CalledProcessError:
        return None
    others = [line.split(":", 1)[1] for line in out.splitlines() if not line.endswith(path)]
    return others[0] if others else None


def read(repo: Path) -> tuple[list[dict], list[dict]]:
    """(measurements, left out): each figure where a commit changed it, with its release."""
    kept, left, last = [], [], {}
    # --follow goes on into wav2vec2_base.json, which the file was first copied from: not BridgeTower's.
    steps = [(c, d, p) for c, d, p in history(repo, OLD, True) if p == OLD] + history(repo, FIXTURE, False)
    for commit, date, path in steps:
        try:
            data = json.loads(git(repo, "show", f"{commit}:{path}"))
        except subprocess.CalledProcessError:
            continue  # deleted there
        found = figures_in(data)
        for device, value in found.items():
            if last.get(device) == value:
                continue
            last[device] = value
            item = {"device": device, "value": value, "commit": commit, "date": date, "file": path}
            source = copied(repo, commit, path, value)
            twin = [d for d, v in found.items() if d != device and v == value and last.get(d) == value]
            if source:
                left.append({**item, "why": f"copied: {source} held {value} before this commit"})
            elif twin:
                left.append(
                    {**item, "why": f"a placeholder: the same figure as {twin[0]} in the same commit"}
                )
            else:
                kept.append({**item, **release(repo, commit)})
    return kept, left


def check(kept: list[dict], recipe: Path) -> list[str]:
    """Where recipes/bridgetower/recipe.yaml's optimum-habana references differ from the history's figures."""
    import yaml

    loaded = yaml.safe_load(recipe.read_text())
    refs = [r for v in loaded["variants"] for r in v.get("references", []) if r.get("commit")]
    problems = []
    for item in kept:
        match = [r for r in refs if r["commit"] == item["commit"] and r["device"] == item["device"]]
        if not match:
            problems.append(f"{item['device']} {item['value']} at {item['commit'][:9]}: not in {recipe}")
            continue
        ref = match[0]
        want = f"SynapseAI {item['synapse']}, optimum-habana {item['optimum_habana']}"
        for key, got, expected in (
            ("value", ref["value"], item["value"]),
            ("date", str(ref["date"]), item["date"]),
        ):
            if got != expected:
                problems.append(f"{item['commit'][:9]} {key}: recipe {got}, history {expected}")
        if not str(ref.get("release", "")).startswith(want):
            problems.append(f"{item['commit'][:9]} release: recipe {ref.get('release')!r}, history {want!r}")
    extra = {r["commit"] for r in refs} - {i["commit"] for i in kept}
    problems += [f"{c[:9]}: in {recipe}, but no figure of the history" for c in sorted(extra)]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--optimum-habana", type=Path, required=True, help="a clone of huggingface/optimum-habana"
    )
    parser.add_argument(
        "--check", action="store_true", help="hold recipes/bridgetower/recipe.yaml to the history"
    )
    args = parser.parse_args()
    kept, left = read(args.optimum_habana)
    for item in left:
        print(
            f"# left out: {item['device']} {item['value']} at {item['commit']} ({item['date']}): {item['why']}"
        )
    for item in kept:
        print(json.dumps(item))
    if args.check:
        problems = check(kept, Path(__file__).resolve().parents[1] / "recipe.yaml")
        for problem in problems:
            print(f"differs: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
