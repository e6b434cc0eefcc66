"""The house plan's arrows, checked on the source: no import cycle (imports made inside
functions count), no module imports one from a layer above it, inside ``pipeline/`` the
roles stay apart (the learner and the generators never import each other, the seams import
neither, and the commands sit on top), and inside ``fit/`` the commands sit on top and the
forecast imports no front end. The rules are written out in ``docs/design/index.md`` ("The layout
and its arrows")."""

from __future__ import annotations

import ast
from pathlib import Path

import scalerl

SRC = Path(scalerl.__file__).parent
DESIGN = Path(__file__).parents[1] / "docs" / "design" / "index.md"


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
TRAINER = ("scalerl.rollout", "scalerl.models", "scalerl.data", "scalerl.algo")
FORBIDDEN = {
    "scalerl.fit": ("scalerl.",),  # nothing of the package but fit itself (and runfolder, its bundled curves)
    "scalerl.algo": ("scalerl.",),
    "scalerl.types": ("scalerl.",),
    "scalerl.runfolder": ("scalerl.",),  # the run folder's names, keys, reader and state: a leaf
    "scalerl.yaml_io": ("scalerl.",),  # bounded YAML: a leaf
    "scalerl.plugins": ("scalerl.",),  # the plug-in loader, the user's code bounded, the console:
    "scalerl.user_code": ("scalerl.",),  # leaves that every layer may use
    "scalerl.progress": ("scalerl.",),
    "scalerl.config": (*ABOVE_ALL, "scalerl.rollout", "scalerl.models", "scalerl.data", "scalerl.fit"),
    "scalerl.data": (*ABOVE_ALL, "scalerl.rollout", "scalerl.models", "scalerl.config"),
    "scalerl.models": (*ABOVE_ALL, "scalerl.rollout", "scalerl.config"),
    "scalerl.rollout": (*ABOVE_ALL, "scalerl.config"),
    "scalerl.live_forecast": (*ABOVE_ALL, *TRAINER),  # the law and the config, never the trainer
    "scalerl.eval": ABOVE_ALL,
    "scalerl.compute": ABOVE_ALL,
    "scalerl.metrics": ABOVE_ALL,
    "scalerl.forecast_figure": ("scalerl.",),  # a leaf: records in, a PNG out (runfolder allowed below)
    "scalerl.checkpoint": ABOVE_ALL,
    # the live page reads run folders and the law: never the trainer, the config or the CLI's commands
    "scalerl.serve": ("scalerl.pipeline", "scalerl.experiments", "scalerl.config", *TRAINER),
    # where users already work (Optuna): the forecast only, and nothing of the package imports it
    "scalerl.integrations": (*ABOVE_ALL, *TRAINER, "scalerl.config", "scalerl.serve"),
}
"""Layer → the module prefixes it must never import (its own package excepted)."""
ALLOWED = {("scalerl.fit.commands.demo", "scalerl.examples"),  # the bundled demo curves: data, not code
           # the run folder, one module every reader and the trainer import: names, keys, reader, state
           ("scalerl.fit", "scalerl.runfolder"), ("scalerl.forecast_figure", "scalerl.runfolder"),
           ("scalerl.progress", "scalerl.runfolder"), ("scalerl.runfolder", "scalerl.yaml_io"),
           # the one module of the config that needs runtime code: tasks, reward functions,
           # environments, vLLM's presence, LoRA's spec; still never the pipeline, cli or experiments
           ("scalerl.config.runtime", "scalerl.data"), ("scalerl.config.runtime", "scalerl.rollout"),
           ("scalerl.config.runtime", "scalerl.models"),
           # the Optuna objective trains a scalerl run as a trial: through the study wing's one entry
           ("scalerl.integrations.optuna", "scalerl.experiments.trial")}
"""(module prefix, import prefix) pairs a FORBIDDEN rule lets through."""


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_no_module_imports_one_from_a_layer_above_it():
    wrong = []
    for module, deps in _graph().items():
        for layer, banned in FORBIDDEN.items():
            if _under(module, layer):
                wrong += [f"{module} -> {d}" for d in deps
                          if any(_under(d, b.rstrip(".")) for b in banned) and not _under(d, layer)
                          and not any(_under(module, m) and _under(d, i) for m, i in ALLOWED)]
    assert wrong == []


def test_config_runtime_imports_only_what_its_checks_need():
    """``config/runtime.py`` is the config's one door to runtime code, and a narrow one."""
    deps = _graph()["scalerl.config.runtime"]
    assert {d for d in deps if not _under(d, "scalerl.config")} <= {
        "scalerl.data.tasks.registry", "scalerl.data.tasks.user_reward", "scalerl.data.tasks.spec",
        "scalerl.rollout.env", "scalerl.rollout.vllm_support", "scalerl.models.lora"}


P = "scalerl.pipeline"
STORY = (f"{P}.run", f"{P}.build", f"{P}.steps")
ROLES = {f"{P}.learner": f"{P}.generators", f"{P}.generators": f"{P}.learner"}


def _pipeline_part(module: str) -> str:
    """``learner``, ``generators``, ``commands``, ``story`` (run, steps, build) or ``seam`` (the rest
    of ``pipeline/``: the plan, the backend table, weights, queues, stop, restarts, ...)."""
    for role in (f"{P}.learner", f"{P}.generators", f"{P}.commands"):
        if _under(module, role):
            return role.rpartition(".")[2]
    return "story" if module in STORY else "seam"


def test_the_pipeline_roles_never_import_each_other_and_the_commands_sit_on_top():
    """Inside ``pipeline/``: seams <- learner | generators <- story (run, steps, build) <- commands.
    The learner and the generators never import each other (the backend table names the
    generator transports as strings, imported only when chosen), the seams import no role,
    and nothing but a command imports a command."""
    may_import = {"seam": {"seam"}, "learner": {"seam", "learner"}, "generators": {"seam", "generators"},
                  "story": {"seam", "learner", "generators", "story"},
                  "commands": {"seam", "learner", "generators", "story", "commands"}}
    graph = _graph()
    wrong = [f"{m} -> {d}" for m, deps in graph.items() if _under(m, P) and m != P
             for d in deps if _under(d, P) and d != P
             and _pipeline_part(d) not in may_import[_pipeline_part(m)]]
    assert wrong == []
    outside = [f"{m} -> {d}" for m, deps in graph.items() if not _under(m, P)
               for d in deps if _pipeline_part(d) == "commands" and _under(d, P)]
    assert all(m.startswith(("scalerl.cli ", "scalerl.experiments")) for m in outside), outside


F = "scalerl.fit"
FRONT_ENDS = (f"{F}.commands", f"{F}.plot", f"{F}.report", f"{F}.compare", f"{F}.choose", "scalerl.serve",
              "scalerl.pipeline", "scalerl.experiments", "scalerl.live_forecast", "scalerl.cli")  # fmt: skip


def test_inside_fit_the_commands_sit_on_top_and_the_forecast_imports_no_front_end():
    """``fit/`` by role: the commands (``fit/commands/``) on top, which nothing else in ``fit/``
    imports; the forecast (``fit/forecast/``) imports no front end (a command, the figures, the
    reports, the studies); the prior (``fit/prior/``) no command; and no module of ``fit/`` but a
    command reads ``argparse``."""
    graph = _graph()
    upward = [f"{m} -> {d}" for m, deps in graph.items() if _under(m, F) and not _under(m, f"{F}.commands")
              for d in deps if _under(d, f"{F}.commands")]  # fmt: skip
    assert upward == []
    front = [f"{m} -> {d}" for m, deps in graph.items() if _under(m, f"{F}.forecast")
             for d in deps if any(_under(d, f) for f in FRONT_ENDS)]  # fmt: skip
    assert front == []
    argparse_users = [p for p in sorted((SRC / "fit").rglob("*.py")) if "commands" not in p.parts
                      and "argparse" in p.read_text()]  # fmt: skip
    assert argparse_users == []


def test_fit_has_one_forecaster_and_no_arrow_back_up():
    """One forecaster: nothing of the second (``fit.extrapolate``'s bands and reaches) is left;
    no module outside ``fit/forecast/`` reads into a forecast's draws (``x.draws.y``: every
    quantile and probability is the ``Forecast``'s or ``forecast.between``'s); the prior's maths
    and the clock (``fit/prior/``, ``fit/time/``) import nothing of the forecast, which imports
    them (forecast -> prior, one way); and the package's face is the ``Forecast``."""
    import scalerl.fit

    graph = _graph()
    assert not (SRC / "fit" / "extrapolate.py").exists() and not any(
        d == f"{F}.extrapolate" for deps in graph.values() for d in deps)
    up = [f"{m} -> {d}" for m, deps in graph.items() if _under(m, f"{F}.prior") or _under(m, f"{F}.time")
          for d in deps if _under(d, f"{F}.forecast")]  # fmt: skip
    assert up == []
    into = []
    for path in sorted(SRC.rglob("*.py")):
        if _under(_module(path), f"{F}.forecast"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "draws":
                into.append(f"{_module(path)}:{node.lineno} .draws.{node.attr}")
    assert into == []
    assert {"Forecast", "forecast_of", "ForecastOptions", "RunLog"} <= set(scalerl.fit.__all__)


def test_the_run_folder_is_named_in_one_module():
    """Every module names a run folder's files through ``runfolder`` (its constants), never
    as a string of its own: a literal of those names appears only in ``runfolder.py``."""
    import scalerl.runfolder as rf

    files = (rf.METRICS, rf.CONFIG, rf.STATUS, rf.TRAIN_LOG, rf.SAMPLES, rf.PLACEMENT, rf.REPORT, rf.FIT_FIGURE,
             rf.SFT_RESULT, rf.SWEEP, rf.DECISIONS, rf.STUDY, *(n for n in rf.NOT_RUNS if n not in (rf.MODEL, rf.WANDB)))  # fmt: skip
    # (``model``, the exported model's folder, is also the config's section and a keyword, and
    # ``wandb`` the library's name: not checked)
    names = [f"{q}{n}{q}" for n in files for q in ("'", '"')]  # either quote, in code or an f-string
    found = [f"{p.relative_to(SRC)}: {n}" for p in sorted(SRC.rglob("*.py")) if p.name != "runfolder.py"
             for n in names if n in p.read_text()]  # fmt: skip
    assert found == []


def test_the_forecast_record_keys_are_named_in_one_module():
    """The ``forecast_*`` keys of a live record are written and read through ``runfolder.Forecast``:
    no other module spells one out."""
    from scalerl.runfolder import FORECAST_KEYS

    found = [f"{p.relative_to(SRC)}: {k}" for p in sorted(SRC.rglob("*.py")) if p.name != "runfolder.py"
             for k in FORECAST_KEYS if f'"{k}"' in p.read_text() or f"'{k}'" in p.read_text()]  # fmt: skip
    assert found == []


def test_the_document_the_rules_cite_exists_and_names_the_rooms():
    text = DESIGN.read_text(encoding="utf-8")
    assert "## The layout and its arrows" in text
    for room in ("learner/", "generators/", "commands/", "plan/", "config/runtime.py", "live_forecast",
                 "fit/time/", "fit/forecast/", "fit/prior/", "fit/commands/", "runfolder"):
        assert room in text, room


def test_the_modules_named_plan_are_the_run_plan_and_the_plan_command():
    """``pipeline/plan/`` is the run plan; ``fit/commands/plan.py`` is ``scalerl plan``, the
    command that prints a forecast's time to target (``fit/commands/plan_answer.py`` adds the splits)."""
    assert sorted(m for m in _graph() if m.rpartition(".")[2] == "plan") == [
        "scalerl.fit.commands.plan", "scalerl.pipeline.plan"]


def test_only_the_integrations_import_an_optional_peer():
    """``optuna`` is an extra (``pip install scalerl[optuna]``): the core never imports it."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if _under(_module(path), "scalerl.integrations"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            wrong += [f"{_module(path)} imports {n}" for n in names if n.split(".")[0] == "optuna"]
    assert wrong == []
    assert not any(_under(m, "scalerl.integrations") for deps in _graph().values() for m in deps)
