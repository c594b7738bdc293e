"""A Markdown table of a report, read back by its first header: what the report's tests check cell by cell."""

from __future__ import annotations


def table(markdown: str, first_header: str, containing: str = "") -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the first table whose header row starts with `first_header` (and holds
    `containing`, where given)."""
    lines = markdown.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |") and containing in line
    )
    found = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        found.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return found[0], found[2:]


def column(markdown: str, first_header: str, header: str, containing: str = "") -> list[str]:
    """One column of that table, top to bottom."""
    headers, rows = table(markdown, first_header, containing)
    return [row[headers.index(header)] for row in rows]
