"""Untrusted YAML read in time and memory bounded by its length, whatever its anchors.

A few hundred bytes of YAML can describe an object of billions of values: every alias, and
every merge key (`<<: [*a, *a]`), repeats a whole subtree, so a chain of them doubles the
work at each level. `load_bounded_yaml` therefore composes the node graph first (linear in
the text: an alias is a reference to a node already composed), measures the size and depth
the constructed object would have, counting each node once per use but computing each
node's measure once, and constructs only a document within the limits.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# a safe loader, C-accelerated when libyaml is available
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

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


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def _key_name(key: Node) -> str:
    return key.value if isinstance(key, ScalarNode) else "?"


class _Measurer:
    def __init__(self, limits: YamlLimits) -> None:
        self.limits = limits
        self.measured: dict[int, _Measure] = {}
        self.open: set[int] = set()  # nodes being measured: meeting one again is a cycle

    def measure(self, node: Node, depth: int, path: str) -> _Measure:
        limits = self.limits
        if depth > limits.max_depth:
            raise DocumentRefused(
                f"nests deeper than {limits.max_depth} levels (at {path}); flatten the structure"
            )
        known = self.measured.get(id(node))
        if known is not None:
            if depth + known.height > limits.max_depth:
                raise DocumentRefused(
                    f"nests deeper than {limits.max_depth} levels (through the alias at "
                    f"{path}); flatten the structure"
                )
            return known
        if id(node) in self.open:
            raise DocumentRefused(
                f"the alias at {path} refers to the anchor that contains it, a recursive "
                "structure with no end; write the values out plainly"
            )
        self.open.add(id(node))
        result = self._measure_new(node, depth, path)
        self.open.discard(id(node))
        self.measured[id(node)] = result
        return result

    def _measure_new(self, node: Node, depth: int, path: str) -> _Measure:
        if isinstance(node, ScalarNode):
            self._check_scalar(node, path)
            return _Measure(values=1, height=0)
        children: list[tuple[Node, str]] = []
        if isinstance(node, SequenceNode):
            children = [(item, _join(path, i)) for i, item in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            for key, item in node.value:
                item_path = _join(path, _key_name(key))
                children += [(key, item_path), (item, item_path)]
        values, height = 1, 0
        for child, child_path in children:
            measured = self.measure(child, depth + 1, child_path)
            values += measured.values
            height = max(height, measured.height + 1)
            # every node is part of the whole document, so one this big is already too many
            if values > self.limits.max_values:
                raise DocumentRefused(
                    f"expands to more than {self.limits.max_values} values (YAML "
                    f"anchors/aliases and merge keys count each use; passed at {child_path}); "
                    "write the values out plainly"
                )
        return _Measure(values=values, height=height)

    def _check_scalar(self, node: ScalarNode, path: str) -> None:
        length = len(node.value)
        if node.tag in _NUMBER_TAGS and length > self.limits.max_number_chars:
            raise ValueRefused(
                path,
                f"a number {length} characters long, above the limit of "
                f"{self.limits.max_number_chars}; write a smaller number, or quote it if it "
                "is text",
            )


def load_bounded_yaml(text: str, limits: YamlLimits) -> object:
    """The document of `text` (None when empty), built only if it fits `limits`.

    Raises `DocumentRefused` or `ValueRefused` before constructing anything too large, and
    `yaml.YAMLError` for text that is not YAML (or holds tags a safe loader refuses).
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Measurer(limits).measure(node, 0, "")
        return loader.construct_document(node)
    finally:
        loader.dispose()
