"""Untrusted YAML read in time and memory bounded by its length, whatever its anchors.

A few hundred bytes of YAML can describe an object of billions of values: every alias, and
every merge key (`<<: [*a, *a]`), repeats a whole subtree, so a chain of them doubles the
work at each level. `load_bounded_yaml` therefore composes the node graph first (linear in
the text: an alias is a reference to a node already composed), measures the size and depth
the constructed object would have, counting each node once per use but computing each
node's measure once, and constructs only a document within the limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:  # C-accelerated when libyaml is available
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_NUMBER_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})


class DocumentRefused(Exception):
    """The document as a whole is refused: too many values, too deep, or endless."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class ValueRefused(Exception):
    """One value of the document is refused; `path` says where (`a.b[0]`; "" for the top)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class YamlLimits:
    max_values: int
    max_depth: int
    max_number_chars: int


@dataclass(frozen=True)
class _Measure:
    values: int  # nodes of the constructed object, each alias counted as what it repeats
    height: int  # levels of collections below the node


_SCALAR = _Measure(values=1, height=0)

# Where a node is, as (parent, key or index): built for every node, rendered only to refuse.
_Where = tuple["_Where", str | int] | None


def _render(where: _Where) -> str:
    parts: list[str | int] = []
    while where is not None:
        where, part = where
        parts.append(part)
    path = ""
    for part in reversed(parts):
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _key_name(key: Node) -> str:
    return key.value if isinstance(key, ScalarNode) else "?"


def _children(node: Node, where: _Where) -> Iterator[tuple[Node, _Where]]:
    if isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield item, (where, index)
    elif isinstance(node, MappingNode):
        for key, item in node.value:
            item_where = (where, _key_name(key))
            yield key, item_where
            yield item, item_where


class _Measurer:
    def __init__(self, limits: YamlLimits) -> None:
        self.limits = limits
        self.measured: dict[int, _Measure] = {}
        self.open: set[int] = set()  # nodes being measured: meeting one again is a cycle

    def measure(self, node: Node, depth: int, where: _Where) -> _Measure:
        limits = self.limits
        if depth > limits.max_depth:
            raise DocumentRefused(
                f"nests deeper than {limits.max_depth} levels (at {_render(where)}); flatten "
                "the structure"
            )
        if isinstance(node, ScalarNode):
            self._check_scalar(node, where)
            return _SCALAR
        known = self.measured.get(id(node))
        if known is not None:
            if depth + known.height > limits.max_depth:
                raise DocumentRefused(
                    f"nests deeper than {limits.max_depth} levels (through the alias at "
                    f"{_render(where)}); flatten the structure"
                )
            return known
        if id(node) in self.open:
            raise DocumentRefused(
                f"the alias at {_render(where)} refers to the anchor that contains it, a "
                "recursive structure with no end; write the values out plainly"
            )
        self.open.add(id(node))
        result = self._measure_collection(node, depth, where)
        self.open.discard(id(node))
        self.measured[id(node)] = result
        return result

    def _measure_collection(self, node: Node, depth: int, where: _Where) -> _Measure:
        if isinstance(node, MappingNode):
            _refuse_duplicate_keys(node, where)
        values, height = 1, 0
        for child, child_where in _children(node, where):
            measured = self.measure(child, depth + 1, child_where)
            values += measured.values
            height = max(height, measured.height + 1)
            # every node is part of the whole document, so one this big is already too many
            if values > self.limits.max_values:
                raise DocumentRefused(
                    f"{_too_many(self.limits)}; passed at {_render(child_where)}); write the "
                    "values out plainly"
                )
        return _Measure(values=values, height=height)

    def _check_scalar(self, node: ScalarNode, where: _Where) -> None:
        length = len(node.value)
        if node.tag in _NUMBER_TAGS and length > self.limits.max_number_chars:
            raise ValueRefused(
                _render(where),
                f"a number {length} characters long, above the limit of "
                f"{self.limits.max_number_chars}; write a smaller number, or quote it if it "
                "is text",
            )


def _refuse_duplicate_keys(node: MappingNode, where: _Where) -> None:
    """A key written twice in one mapping: YAML keeps the last one silently, so the first
    (say, a `gpus: 4` above a `gpus: 0`) would be lost without a word."""
    seen: set[str] = set()
    for key, _item in node.value:
        if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        if key.value in seen:
            raise ValueRefused(
                _render((where, key.value)),
                "is given twice in the same mapping (line "
                f"{key.start_mark.line + 1}); keep one of them",
            )
        seen.add(key.value)


def _too_many(limits: YamlLimits) -> str:
    return (
        f"expands to more than {limits.max_values} values (YAML anchors/aliases and merge "
        "keys count each use"
    )


class _CountingLoader(_SafeLoader):
    """Stops composing past `max_values` nodes: a document holds at least every node it
    composes, so it would be refused anyway, and composing costs time."""

    def __init__(self, text: str, limits: YamlLimits) -> None:
        super().__init__(text)
        self.limits = limits
        self.nodes_left = limits.max_values

    def resolve(self, kind: type[Node], value: Any, implicit: Any) -> str:
        # called for every node not tagged explicitly (and a tag costs bytes of text)
        self.nodes_left -= 1
        if self.nodes_left < 0:
            raise DocumentRefused(f"{_too_many(self.limits)}); write the values out plainly")
        return super().resolve(kind, value, implicit)


def load_bounded_yaml(text: str, limits: YamlLimits) -> object:
    """The document of `text` (None when empty), built only if it fits `limits`.

    Raises `DocumentRefused` or `ValueRefused` before constructing anything too large, and
    `yaml.YAMLError` for text that is not YAML (or holds tags a safe loader refuses).
    """
    loader = _CountingLoader(text, limits)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Measurer(limits).measure(node, 0, None)
        return loader.construct_document(node)
    finally:
        loader.dispose()
