"""Reading YAML files with errors that name the file, line and column.

Every YAML file the project reads goes through ``load_yaml``, whose loader is PyYAML's safe loader
with limits: a file is at most ``MAX_BYTES`` long and nested at most ``MAX_DEPTH`` deep, it uses at
most ``MAX_ALIASES`` aliases and they add at most ``MAX_ALIAS_EXPANSION`` characters once expanded (an
"alias bomb" of nine nested lists of nine aliases is a few hundred bytes but expands to 10^9 nodes),
and a key that appears twice in one mapping is an error naming both lines (PyYAML keeps the last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accelmap.errors import SpecError

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 100
MAX_ALIASES = 1000
MAX_ALIAS_EXPANSION = 1_000_000


class LimitedSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs, recursive aliases, deep nesting and duplicate keys."""

    def __init__(self, stream, duplicates: list[str] | None = None):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0
        # None: a duplicate key is an error. A list: the later value wins, as in PyYAML (and in the
        # peer tools that read their files with it), and each duplicate is recorded here.
        self._duplicates = duplicates

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise ComposerError(None, None, f"more than {MAX_ALIASES} aliases (*name) in one document",
                                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        if self._aliases and node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:   # an unhashable key: the base class reports it
                    continue
                if first is not key_node and self._duplicates is not None:
                    self._duplicates.append(f"duplicate key {_short(key)} at lines {first.start_mark.line + 1} "
                                            f"and {key_node.start_mark.line + 1}: the later one is used")
                elif first is not key_node:
                    raise ConstructorError(None, None, f"duplicate key {_short(key)} (first at line "
                                           f"{first.start_mark.line + 1}, again at line "
                                           f"{key_node.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _check_expansion(root: Node) -> None:
    """Refuses cycles, and aliases that make the expanded document (counted in characters of its
    scalars plus two per node) more than ``MAX_ALIAS_EXPANSION`` larger than the document itself."""
    size: dict[int, int] = {}
    limit = sum(_weight(n) for n in _distinct(root)) + MAX_ALIAS_EXPANSION

    def walk(node: Node, active: set[int]) -> int:
        k = id(node)
        if k in size:
            return size[k]
        if k in active:
            raise ComposerError(None, None, "an alias refers to the node that contains it (a recursive "
                                "structure)", node.start_mark)
        n = _weight(node)
        if isinstance(node, (SequenceNode, MappingNode)):
            active.add(k)
            children = node.value if isinstance(node, SequenceNode) else [x for kv in node.value for x in kv]
            for c in children:
                n += walk(c, active)
                if n > limit:
                    raise ComposerError(None, None, f"aliases expand this document by more than "
                                        f"{MAX_ALIAS_EXPANSION:,} characters", node.start_mark)
            active.discard(k)
        size[k] = n
        return n

    walk(root, set())


def _weight(node: Node) -> int:
    return 2 + (len(node.value) if isinstance(node, ScalarNode) else 0)


def _distinct(root: Node) -> list[Node]:
    seen: dict[int, Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            stack.extend(x for kv in node.value for x in kv)
    return list(seen.values())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _short(value: Any, limit: int = 40) -> str:
    return _cut(repr(value), limit)


def parse_yaml(text: str, where: str, duplicates: list[str] | None = None) -> Any:
    """Parse one YAML document with the limited loader; errors are SpecErrors naming ``where``.
    ``duplicates``: see ``LimitedSafeLoader`` (for peer tools' files only; ours are strict)."""
    if len(text) > MAX_BYTES:
        raise SpecError(f"too large for a description: {len(text):,} characters (at most {MAX_BYTES:,})",
                        where=where)
    loader = LimitedSafeLoader(text, duplicates)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{line}not valid YAML: {_cut(' '.join(str(problem).split()), 200)}", where=where) from None
    except RecursionError:
        raise SpecError("not valid YAML: nested too deeply", where=where) from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path, duplicates: list[str] | None = None) -> Any:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e.__class__.__name__}", where=str(p)) from None
    if len(data) > MAX_BYTES:
        raise SpecError(f"too large for a description: more than {MAX_BYTES:,} bytes", where=str(p))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("cannot read: UnicodeDecodeError (a YAML file must be UTF-8 text)", where=str(p)) from None
    return parse_yaml(text, str(p), duplicates)
