"""A base image read back and held to the accelerator's base.yaml: its OS, glibc, Python, the packages it ships
(pip's own list), its environment and its tools, each fact confirmed or corrected, and those base.yaml
could not source (`unverified`) said so.

The facts are read by one shell script run inside the image (docker run, apptainer exec), whose output
has one section per fact; nothing here starts a container.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from reprokit.plan.accelerators import Base

SECTIONS = ("os", "glibc", "python", "numactl", "compiler", "pip", "env")


def script(interpreter: str) -> str:
    """The shell script that prints the facts, one `== <section>` header each."""
    python = shlex.quote(interpreter)
    return "\n".join(
        [
            'echo "== os"; (. /etc/os-release && echo "$PRETTY_NAME")',
            'echo "== glibc"; ldd --version 2>&1 | sed -n 1p',
            f"echo \"== python\"; {python} -c 'import sys; print(sys.version.split()[0])'",
            'echo "== numactl"; command -v numactl || true',
            'echo "== compiler"; command -v g++ || command -v c++ || true',
            f'echo "== pip"; {python} -m pip list --format=freeze 2>/dev/null',
            'echo "== env"; env',
        ]
    )


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Facts:
    os: str = ""
    glibc: str = ""
    python: str = ""
    numactl: bool = False
    compiler: bool = False
    packages: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> Facts:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        header = re.fullmatch(r"== (\w+)", line.strip())
        if header and header.group(1) in SECTIONS:
            current = header.group(1)
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    first = {
        name: next((line.strip() for line in lines if line.strip()), "") for name, lines in sections.items()
    }
    glibc = re.search(r"(\d+\.\d+)\s*$", first.get("glibc", ""))
    packages = {}
    for line in sections.get("pip", []):
        name, sep, version = line.strip().partition("==")
        if sep:
            packages[normalized(name)] = version
    env = {}
    for line in sections.get("env", []):
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            env[key] = value
    return Facts(
        os=first.get("os", ""),
        glibc=glibc.group(1) if glibc else "",
        python=first.get("python", ""),
        numactl=bool(first.get("numactl")),
        compiler=bool(first.get("compiler")),
        packages=packages,
        env=env,
    )


def _same_os(said: str, seen: str) -> bool:
    """base.yaml's `Ubuntu 24.04` against /etc/os-release's `Ubuntu 24.04.1 LTS`: each word said
    begins a word seen (case aside, parentheses ignored)."""
    words = [w for w in re.split(r"[\s()]+", seen.lower()) if w]
    return all(any(w.startswith(part) for w in words) for part in re.split(r"[\s()]+", said.lower()) if part)


@dataclass
class Comparison:
    """Each fact of the base: what base.yaml says, what the image has, and the words for it."""

    confirmed: list[str] = field(default_factory=list)
    corrected: list[str] = field(default_factory=list)  # unverified facts the image shows otherwise
    wrong: list[str] = field(
        default_factory=list
    )  # verified facts the image contradicts: the pins rest on them


def compare(base: Base, facts: Facts, kit_layer: frozenset[str] = frozenset()) -> Comparison:
    """`facts` held to `base`; `kit_layer`: packages the kit's own layer installs over the base (read
    from the kit's image rather than the base, they say nothing about the base)."""
    result = Comparison()
    unverified = {normalized(name) for name in base.unverified}

    def judge(name: str, said: str, seen: str | None, same: bool) -> None:
        shown = seen if seen is not None else "absent"
        if same:
            result.confirmed.append(
                f"{name} {said}"
                + (" (unverified in base.yaml: now confirmed)" if normalized(name) in unverified else "")
            )
        elif normalized(name) in unverified:
            result.corrected.append(f"{name} is {shown} here, base.yaml says {said} (unverified)")
        else:
            result.wrong.append(f"{name} is {shown} here, base.yaml says {said}")

    judge("os", base.os, facts.os or None, bool(facts.os) and _same_os(base.os, facts.os))
    judge("glibc", base.glibc, facts.glibc or None, facts.glibc == base.glibc)
    judge(
        "python",
        base.python,
        facts.python or None,
        facts.python == base.python or facts.python.startswith(base.python + "."),
    )
    for name, version in base.ships.items():
        if normalized(name) in kit_layer:
            continue
        seen = facts.packages.get(normalized(name))
        judge(name, version, seen, seen == version)
    for key, value in base.env.items():
        seen = facts.env.get(key)
        judge(key, value, seen, seen == value)
    for tool, said, seen in (
        ("numactl", base.has_numactl, facts.numactl),
        ("compiler", base.has_compiler, facts.compiler),
    ):
        if tool in kit_layer:
            continue
        shown = "present" if seen else "absent"
        if said is None:  # base.yaml could not say: the image answers
            result.corrected.append(f"{tool} is {shown} here, base.yaml does not say (unverified)")
        else:
            judge(tool, "present" if said else "absent", shown, said == seen)
    return result
