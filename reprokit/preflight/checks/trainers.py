"""Trainers: each cell's trainer module imports in the Python that would run it (this machine's without
a container, the image's in Docker or a local Apptainer image), in a child process, since the host never
imports torch; and that Python's torch is built for the accelerator (CUDA on cuda). Seconds, where a
stepped run would take minutes to find a module that is not there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from reprokit import images
from reprokit.contract import layout, trainers
from reprokit.preflight import imagereads, pythonreads
from reprokit.preflight.checks.base import Check
from reprokit.preflight.checks.image import KEPT
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

# Importing torch, transformers and timm on a loaded machine: tens of seconds at worst.
IMPORT_TIMEOUT_S = 300
# What the child runs: each module as `python -m` would find it (a package's __main__, whose
# `if __name__ == "__main__"` keeps it from training), then what torch it imported says of itself.
PROBE = """\
import importlib, importlib.util, json, os, sys, time
found = {"modules": {}}
for name in sys.argv[1:]:
    started = time.monotonic()
    try:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}")
        importlib.import_module(name + ".__main__" if spec.submodule_search_locations else name)
        found["modules"][name] = {"seconds": round(time.monotonic() - started, 2)}
    except BaseException as error:
        said = (str(error).strip().splitlines() or [""])[0][:300]
        found["modules"][name] = {"error": f"{type(error).__name__}: {said}".rstrip(": ")}
torch = sys.modules.get("torch")
if torch is not None:
    found["torch"] = torch.__version__
    found["cuda"] = getattr(torch.version, "cuda", None)
    # What torch was built for, by each build's attribute (cuda, hip, ...): a profile's torch_build.
    found["builds"] = {k: v for k, v in vars(torch.version).items() if k.isalpha() and isinstance(v, str)}
    # device_count, not is_available: a CUDA torch on a machine whose driver it cannot use counts 0.
    if os.environ.get("REPROKIT_PROBE_DEVICES"):
        found["cuda_devices"] = torch.cuda.device_count()
found["python"] = sys.version.split()[0]
print("REPROKIT-PROBE " + json.dumps(found))
"""


def parse(output: str) -> dict | None:
    """The probe's answer in a child's output (a base image may print a banner first)."""
    for line in reversed(output.splitlines()):
        if line.startswith("REPROKIT-PROBE "):
            return json.loads(line.removeprefix("REPROKIT-PROBE "))
    return None


def _line(found: dict) -> str:
    return "REPROKIT-PROBE " + json.dumps(found)


def _merged(answers: list[dict]) -> str:
    """One answer from those of single modules (one Python: its torch and version are each one's)."""
    found = {**answers[-1], "modules": {}}
    for answer in answers:
        found["modules"].update(answer["modules"])
    return _line(found)


class Trainers(Check):
    name = "trainers"
    # Where the answer was kept from an earlier read (imagereads.py, pythonreads.py): said beside it.
    kept = ""

    def run(self, context: Context) -> list[Finding]:
        if context.blocked_everywhere():
            return []  # no container, no image: nothing to import in (said above)
        modules = list(dict.fromkeys(c.trainer_module for c in context.cells))
        try:
            output, where = self._probe(context, modules)
        except subprocess.TimeoutExpired:
            return [self.finding(f"importing the trainers took over {IMPORT_TIMEOUT_S} s; no answer", True)]
        except Exception as error:  # noqa: BLE001 -- an engine's or a tool's error: said, not raised
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            return [self.finding(f"the trainers could not be imported: {first}", True)]
        if output is None:
            return [self.finding(where)]
        found = parse(output)
        if found is None:
            tail = (output.strip().splitlines() or ["no output"])[-1][:200]
            return [self.finding(f"the trainers' import in {where} gave no answer: {tail}", True)]
        return self._judged(context, found, where)

    def _probe(self, context: Context, modules: list[str]) -> tuple[str | None, str]:
        """(the probe's output, where it ran); None and why not where it cannot run from here."""
        profile = context.profile
        if context.container == "none":
            path = os.pathsep.join(p for p in (trainers.search_path(), os.environ.get("PYTHONPATH")) if p)
            where = f"this Python ({sys.executable})"
            # The accelerators' trainer-side code too: the trainers load their folder's trainer.py.
            folders = [*trainers.source_folders(), layout.ACCELERATORS]
            env = {**os.environ, "PYTHONPATH": path}
            counts = _counts(context)
            if counts:  # the devices this Python's torch sees, where the cells' count is checked
                env["REPROKIT_PROBE_DEVICES"] = "1"
            # One answer kept per module: a dry run of one recipe after one of all of them imports nothing.
            names = pythonreads.keys(["-c", PROBE], modules, path, folders)
            answers = {} if counts else {m: parse(pythonreads.kept(n) or "") for m, n in names.items()}
            missing = [m for m in modules if answers.get(m) is None]
            if not missing:
                self.kept = pythonreads.KEPT
                return _merged([answers[m] for m in modules]), where
            done = subprocess.run(
                [sys.executable, "-c", PROBE, *missing],
                capture_output=True,
                text=True,
                env=env,
                timeout=IMPORT_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            output = done.stdout + done.stderr
            found = parse(output)
            if found is None:
                return output, where
            if "cuda_devices" not in found:
                for module in missing:
                    answers[module] = {**found, "modules": {module: found["modules"][module]}}
                    pythonreads.keep(names[module], _line(answers[module]))
            return _merged([answers.get(m) or found for m in modules]), where
        options = context.runtime.container.options
        if context.container == "docker":
            tag = getattr(options, "image", None) or images.image_tag(profile)
            engine = images.client(timeout=IMPORT_TIMEOUT_S)
            # No device is counted in the image (REPROKIT_PROBE_DEVICES unset): its answer is the image's
            # alone, kept by its id.
            output, kept = imagereads.run(
                engine,
                tag,
                [profile.python, "-c", PROBE, *modules],
                environment={"PYTHONPATH": "/opt/reprokit"},
                stderr=True,
            )
            self.kept = KEPT if kept else ""
            return output.decode(errors="replace"), f"the image {tag}"
        if context.container == "apptainer" and context.plan.runtime == "local" and shutil.which("apptainer"):
            image = getattr(options, "image", None) or str(images.export_path(profile, "apptainer"))
            done = subprocess.run(
                ["apptainer", "exec", image, profile.python, "-c", PROBE, *modules],
                capture_output=True,
                text=True,
                timeout=IMPORT_TIMEOUT_S,
                env={**os.environ, "APPTAINERENV_PYTHONPATH": "/opt/reprokit"},
            )
            return done.stdout + done.stderr, f"the image {image}"
        return None, f"{context.container} on the nodes: the stepped job imports the trainers where it runs"

    def _judged(self, context: Context, found: dict, where: str) -> list[Finding]:
        result = []
        for module, outcome in found["modules"].items():
            cells = tuple(c.cell_id for c in context.cells if c.trainer_module == module)
            if "error" in outcome:
                result.append(
                    self.finding(f"{module} does not import in {where}: {outcome['error']}", True, cells)
                )
        torch, cuda = found.get("torch"), found.get("cuda")
        profile = context.profile
        build = profile.torch_build
        version = (found.get("builds") or {}).get(build) if build else None
        if build == "cuda" and "builds" not in found:
            version = cuda  # an answer kept from before the probe named its builds
        if build and torch is not None and not version:
            result.append(
                self.finding(
                    f"the torch of {where} ({torch}) is not built for {build}: the {profile.name} cells need "
                    f"one that is (the {profile.name} image's, or pip's {build} wheels)",
                    True,
                )
            )
        seen = found.get("cuda_devices")
        of = _counts(context)
        if version and seen is not None and of:
            visible = (profile.devices.visible_env if profile.devices else None) or "CUDA_VISIBLE_DEVICES"
            wanted = max((c.devices for c in context.cells), default=1)
            if seen < wanted:
                result.append(
                    self.finding(
                        f"the torch of {where} ({torch}) sees {seen} CUDA device(s), the cells would use {wanted} "
                        f"{of}: check {visible}, and that the driver is new enough for {build} {version}",
                        True,
                    )
                )
        if not result:
            seconds = sum(o.get("seconds", 0.0) for o in found["modules"].values())
            built = f", CUDA {cuda}" if cuda else ""
            kept = f" ({self.kept})" if self.kept else ""
            result.append(
                self.finding(
                    f"{len(found['modules'])} trainer module(s) import in {where} in {seconds:.0f} s"
                    + (f" (torch {torch}{built})" if torch else "")
                    + kept
                )
            )
        return result


def _counts(context: Context) -> str | None:
    """Whose count of devices this Python's torch is held to (None: no count is checked here): on cuda,
    the devices the driver listed on this very machine, or a count the user gave that the driver's tool
    could not verify (this is then the count's only check)."""
    if context.profile.torch_device != "cuda":  # counted through torch.cuda (CUDA's, ROCm's HIP)
        return None
    if context.device_name:
        return f"of the {context.device_name} the driver lists"
    if context.devices_unverified:
        return f"(--devices {context.devices_unverified}, which the driver's tool could not verify)"
    return None
