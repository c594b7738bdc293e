"""The release a published figure was measured on, in the words every output uses (`inv show`, the
report's tables, the terminal table): a figure from a vendor's committed CI baselines names its
software release, its date and the commit that set it; the publication's own figure names its source.
Which release judges a cell is chosen when it is planned (`--reference`, plan/release_choice.release_for)."""

from __future__ import annotations

from typing import Any


def said(reference: dict[str, Any] | None) -> str:
    """`release synapse-1.15.0: SynapseAI 1.15.0, optimum-habana 1.11.0.dev0 (2024-03-30, aee789f4f)`;
    `the publication's (blog, 2nd version): optimum-habana 1.7.0 ...` for the publication's own figure
    with the release it names, `the publication's (blog, 2nd version)` without one; '' for none."""
    if not reference:
        return ""
    source = reference.get("source")
    publications = f"the publication's ({source})" if source else "the publication's"
    if not reference.get("release"):
        return publications
    if not reference.get("id"):  # the publication's own figure, with the software it names
        return f"{publications}: {reference['release']}"
    when = ", ".join(str(x) for x in (reference.get("date"), (reference.get("commit") or "")[:9]) if x)
    return f"release {reference.get('id') or '?'}: {reference['release']}" + (f" ({when})" if when else "")


def judged(
    references: list[dict[str, Any]], value: float | None, device: str | None
) -> dict[str, Any] | None:
    """The figure among a row's references that its verdict used (its value on its device)."""
    if value is None:
        return None
    return next((r for r in references if r.get("value") == value and r.get("device") == device), None)
