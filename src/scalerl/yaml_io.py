"""YAML for recipes and ``--set`` values, read with bounds: plain data of a recipe's size only.

``yaml.safe_load`` builds whatever a text describes, and a recipe is untrusted text:

- an *alias bomb* (nine levels of ``&a [*b, *b, ...]``) is a few hundred bytes that the
  parser shares, but every later walk of the value (pydantic's ``model_dump``, the
  ``config.yaml`` written into the run) expands it to 9^9 nodes and exhausts the memory;
- a list nested 20,000 deep (or a mapping 3,000 deep) overflows Python's recursion in the
  composer, a ``RecursionError`` instead of a sentence;
- two keys of one mapping (two ``train:`` sections) silently keep the last;
- ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` and ``!!timestamp`` produce bytes, sets
  and dates where the config holds strings, lists and numbers, and pydantic coerces some
  of them silently (bytes into a ``str``).

:func:`load_yaml` refuses each with :class:`RecipeYAMLError`, whose ``problem`` is one clause
and ``problem_mark`` the place: nesting deeper than :data:`MAX_DEPTH`, more than
:data:`MAX_NODES` values once aliases are expanded (or an alias inside its own anchor), a
repeated key, or one of those tags. An unquoted date stays a string. A recipe is a few
hundred values at most five levels deep, so the bounds never touch a real one.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 64
"""Deepest nesting of lists and mappings, aliases expanded (a recipe needs five)."""
MAX_NODES = 100_000
"""Most values (scalars, lists and mappings) a document may hold once aliases are expanded."""

_YAML = "tag:yaml.org,2002:"
_REFUSED_TAGS = ("binary", "set", "omap", "pairs", "timestamp")


class RecipeYAMLError(yaml.YAMLError):
    """A YAML text that parses but is refused; ``problem`` is one clause without a full stop."""

    def __init__(self, problem: str, mark: yaml.Mark | None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class RecipeLoader(yaml.SafeLoader):
    """``SafeLoader`` that bounds nesting while composing and refuses repeated keys and
    non-plain tags; :func:`load_yaml` bounds the alias-expanded size before constructing."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        # checked on the way down, so a 20,000-deep list stops at level 65, not in Python's stack
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise RecipeYAMLError(f"lists and mappings nest deeper than {MAX_DEPTH} levels",
                                      self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: str | None) -> MappingNode:
        node = super().compose_mapping_node(anchor)
        # on the composed keys, before the constructor flattens ``<<`` merges (whose keys an
        # explicit key may override by design)
        seen: dict[tuple[str, str], ScalarNode] = {}
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag != _YAML + "merge":
                first = seen.setdefault((key.tag, key.value), key)
                if first is not key:
                    raise RecipeYAMLError(f"the key {key.value!r} appears twice in one mapping (first on line "
                                          f"{first.start_mark.line + 1}); keep one", key.start_mark)
        return node


def _refuse_tag(loader: RecipeLoader, node: Node) -> None:
    raise RecipeYAMLError(f"the tag {node.tag.replace(_YAML, '!!')} is not allowed: a recipe holds plain "
                          "strings, numbers, booleans, null, lists and mappings", node.start_mark)


for _tag in _REFUSED_TAGS:
    RecipeLoader.add_constructor(_YAML + _tag, _refuse_tag)
# an unquoted 2024-01-01 stays the string it reads as (no field of the config is a date)
RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _YAML + "timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expanded(root: Node) -> None:
    """Refuse a node graph whose alias-expanded size or depth is past the bounds, or that
    holds itself. Iterative and memoised per node, so a bomb costs its unique nodes only."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, expanded depth)
    open_: set[int] = set()  # nodes whose children are still being measured
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            open_.discard(id(node))
            sizes = [done[id(child)] for child in _children(node)]
            size = 1 + sum(s for s, _ in sizes)
            depth = 1 + max((d for _, d in sizes), default=0)
            if size > MAX_NODES:
                raise RecipeYAMLError(f"its aliases expand to more than {MAX_NODES:,} values (an alias "
                                      "bomb?); write the values out", node.start_mark)
            if depth > MAX_DEPTH:
                raise RecipeYAMLError(f"its aliases nest lists and mappings deeper than {MAX_DEPTH} levels",
                                      node.start_mark)
            done[id(node)] = (size, depth)
        elif id(node) not in done:
            if id(node) in open_:
                raise RecipeYAMLError("an alias refers to a value that contains it", node.start_mark)
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in done)


def load_yaml(text: str) -> Any:
    """The one document in ``text`` as plain Python data (None when empty).

    Raises :class:`RecipeYAMLError` for what the module refuses and ``yaml.YAMLError`` for
    text that is not YAML.
    """
    loader = RecipeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
