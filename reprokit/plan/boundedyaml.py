"""YAML a user wrote, read within bounds before it becomes Python objects: a file's size, and the size
its aliases expand to. A few lines of anchors and aliases nine levels deep (a "billion laughs") are a
small file that expands to billions of nodes: PyYAML builds it as a graph of shared objects in an
instant, and whatever walks it later (validation, `inv show --json`, a copy) runs out of memory. The
node graph is measured as it will be walked, each alias counted as the copy it stands for.

Read with libyaml where PyYAML has it (a recipe in 2-3 ms, not 25: every command reads each recipe
it names): its composer recurses in C, where a file nested a hundred thousand deep ends the process
rather than raising, so the nesting is measured first from libyaml's events, which nest nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reprokit.contract.errors import ReprokitError

# The kit's recipes are about 20 KB and 3,000 nodes each; a hundred times that is still a recipe.
MAX_BYTES = 2**20
MAX_NODES = 300_000
# Collections inside collections: a recipe has about 8 levels. Python's own composer stopped at about
# 450 (its recursion limit), where the files refused for it were refused already.
MAX_DEPTH = 400
# libyaml's reader where PyYAML was built with it (recipes.declared_name reads its events too).
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _too_deep(text: str, limit: int) -> bool:
    """Whether collections nest deeper than `limit` in `text`, from the parser's events (a flat stream:
    no recursion however deep the file)."""
    depth = 0
    for event in yaml.parse(text, Loader=LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > limit:
                return True
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return False


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """The number of nodes `root` stands for with every alias expanded, counted up to `limit` (and
    stopped there); a node that contains itself is refused (it never ends)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = min(total, limit + 1)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ValueError("an alias refers to a node that contains it (it would expand forever)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load(path: Path, what: str) -> Any:
    """The YAML document of `path`, refused in one line naming the file when it is larger than a
    recipe can be or expands past MAX_NODES; a syntax error names its line."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ReprokitError(
                f"{path}: {size:,} bytes, more than a {what} can be ({MAX_BYTES:,}); is it the right file?"
            )
        text = path.read_text()
    except OSError as error:
        raise ReprokitError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ReprokitError(f"{path}: not a {what} (not UTF-8 text)") from None
    loader = LOADER(text)
    try:
        if _too_deep(text, MAX_DEPTH):
            raise RecursionError
        node = loader.get_single_node()
        if node is None:
            return None
        nodes = _expanded_size(node, MAX_NODES)
        if nodes > MAX_NODES:
            raise ReprokitError(
                f"{path}: its aliases expand to more than {MAX_NODES:,} values (a {what} has a few thousand); "
                "refused before reading it into memory"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ReprokitError(f"{path}{where}: not valid YAML: {problem}") from None
    except ValueError as exc:
        raise ReprokitError(f"{path}: not a {what}: {exc}") from None
    except RecursionError:
        raise ReprokitError(f"{path}: not a {what}: nested too deep to read") from None
    finally:
        loader.dispose()
