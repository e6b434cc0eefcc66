"""The house plan's arrows, checked on the source: no import cycle (imports made inside
functions count), and no module imports one from a layer above it (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import scalerl

SRC = Path(scalerl.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every scalerl module ``path`` imports, at the top or inside a function: ``from a.b import c``
    is ``a.b.c`` when that is a module, else ``a.b``."""
    out: set[str] = set()
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        out |= {n for n in names if n in modules}
    return out


def _graph() -> dict[str, set[str]]:
    paths = sorted(SRC.rglob("*.py"))
    modules = {_module(p) for p in paths}
    # a package's __init__ is where its members are re-exported: an arrow to the package is an
    # arrow to its __init__ only, not to every member
    return {_module(p): _imports(p, modules) - {_module(p)} for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_counting_imports_inside_functions():
    graph = {m: {d for d in deps if not (m.startswith(d + ".") and d != "scalerl")}  # a member may use its package's __init__
             for m, deps in _graph().items()}
    assert _cycles(graph) == []


ABOVE_ALL = ("scalerl.cli", "scalerl.pipeline", "scalerl.experiments")
FORBIDDEN = {
    "scalerl.fit": ("scalerl.",),  # nothing of the package but fit itself (and its bundled curves)
    "scalerl.algo": ("scalerl.",),
    "scalerl.types": ("scalerl.",),
    "scalerl.config": (*ABOVE_ALL, "scalerl.rollout", "scalerl.models", "scalerl.data"),  # but config.runtime
    "scalerl.data": (*ABOVE_ALL, "scalerl.rollout", "scalerl.models", "scalerl.config"),
    "scalerl.models": (*ABOVE_ALL, "scalerl.rollout", "scalerl.config"),
    "scalerl.rollout": (*ABOVE_ALL, "scalerl.config"),
    "scalerl.eval": ABOVE_ALL,
    "scalerl.compute": ABOVE_ALL,
    "scalerl.metrics": ABOVE_ALL,
    "scalerl.checkpoint": ABOVE_ALL,
}
"""Layer → the module prefixes it must never import (its own package excepted)."""
ALLOWED = {("scalerl.fit.demo", "scalerl.examples"),  # the bundled demo curves: data, not code
           ("scalerl.config.runtime", "*")}  # the one module of the config that needs runtime code


def test_no_module_imports_one_from_a_layer_above_it():
    wrong = []
    for module, deps in _graph().items():
        for layer, banned in FORBIDDEN.items():
            if module == layer or module.startswith(layer + "."):
                wrong += [f"{module} -> {d}" for d in deps
                          if any(d.startswith(b) for b in banned) and not d.startswith(layer)
                          and (module, d) not in ALLOWED and (module, "*") not in ALLOWED]
    assert wrong == []
