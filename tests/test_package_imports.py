"""The package's import graph, read from the source with ``ast`` (the ``package-dir`` mapping that
ships top-level ``callbacks/`` as ``lite_ppo.callbacks`` hides it from import linters): the
evaluation code must not depend on the callbacks that depend on it, and no part imports a higher layer."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from helpers.paths import REPO

ROOTS = {"lite_ppo": REPO / "src" / "lite_ppo", "lite_ppo.callbacks": REPO / "callbacks"}


def _modules() -> dict[str, Path]:
    out = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Every module ``name`` imports at run time (function-level imports included, ``if
    TYPE_CHECKING:`` blocks left out); ``from package import module`` counts as the module."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _unit(module: str) -> str:
    """The package-level node of a module: ``lite_ppo.<first part>`` (``lite_ppo.callbacks``,
    ``lite_ppo.evaluation``, ``lite_ppo.training.module``, ...)."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {m for m in _imports(name, path, set(modules)) if m in modules}
        graph.setdefault(_unit(name), set()).update(_unit(t) for t in targets if _unit(t) != _unit(name))
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_both_roots():
    graph = package_graph()
    # The reader works: the callbacks use the evaluation code, and the rollout package is found.
    assert "lite_ppo.evaluation" in graph["lite_ppo.callbacks"]
    assert "lite_ppo.rollout" in graph["lite_ppo.callbacks"]


def test_evaluation_never_reaches_the_callbacks():
    """No cycle between lite_ppo.evaluation and lite_ppo.callbacks: the evaluation code (and all it
    imports, transitively) generates through lite_ppo.rollout.producer, never a callback."""
    graph = package_graph()
    assert "lite_ppo.callbacks" not in _reachable(graph, "lite_ppo.evaluation")
    assert "lite_ppo.callbacks" not in _reachable(graph, "lite_ppo.rollout")


def test_no_evaluation_or_rollout_module_imports_a_callback():
    """The evaluation command and runner generate with ``lite_ppo.rollout.producer``, not the
    ``Rollout`` callback; engines, data and rewards know nothing of training."""
    modules = _modules()
    offenders = {
        name: sorted(m for m in _imports(name, path, set(modules)) if m.startswith("lite_ppo.callbacks"))
        for name, path in modules.items()
        if name.startswith(("lite_ppo.evaluation", "lite_ppo.rollout", "lite_ppo.data", "lite_ppo.rewards"))
    }
    assert {name: found for name, found in offenders.items() if found} == {}


# The layers, lowest first: a part may import only parts of lower layers (``callbacks`` are the
# techniques, above the training they hook into; the command line sits on top of everything).
LAYERS = [
    {"lite_ppo.ops", "lite_ppo.errors", "lite_ppo.metric_names", "lite_ppo._moved"},
    {"lite_ppo", "lite_ppo.strategies", "lite_ppo.rewards", "lite_ppo.data", "lite_ppo.config_merge"},
    {"lite_ppo.models", "lite_ppo.step_metrics", "lite_ppo.step_context", "lite_ppo.reliability"},
    {"lite_ppo.rollout", "lite_ppo.checkpoints"},
    {"lite_ppo.technique", "lite_ppo.policy_module"},
    {"lite_ppo.training"},
    {"lite_ppo.evaluation", "lite_ppo.research"},
    {"lite_ppo.callbacks"},
    {"lite_ppo.cli"},
]


def _layer_of() -> dict[str, int]:
    return {unit: level for level, units in enumerate(LAYERS) for unit in units}


def test_every_part_of_the_package_has_a_layer():
    assert set(package_graph()) <= set(_layer_of()), "a new part of the package: give it a layer in LAYERS"


def test_no_part_imports_its_own_or_a_higher_layer():
    """Engines, data and rewards know nothing of training; training knows the technique contract,
    never a technique; techniques never reach the command line. So no cycles between parts either."""
    level = _layer_of()
    upward = sorted(
        f"{unit} -> {target}"
        for unit, targets in package_graph().items()
        for target in targets
        if level[target] >= level[unit]
    )
    assert upward == []


def test_the_layer_check_sees_an_upward_import(monkeypatch):
    """The check above can fail: a made-up import of the command line from the data code is caught."""
    graph = package_graph()
    graph["lite_ppo.data"] = graph["lite_ppo.data"] | {"lite_ppo.cli"}
    monkeypatch.setattr(sys.modules[__name__], "package_graph", lambda: graph)
    with pytest.raises(AssertionError):
        test_no_part_imports_its_own_or_a_higher_layer()


def test_pyproject_lists_every_package_folder():
    """setuptools cannot discover ``lite_ppo.callbacks`` (mapped from callbacks/), so pyproject lists the
    packages; a package folder missing there would be missing from the wheel."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {
        ".".join(["lite_ppo", *init.parent.relative_to(REPO / "src" / "lite_ppo").parts])
        for init in (REPO / "src" / "lite_ppo").rglob("__init__.py")
    } | {"lite_ppo.callbacks"}
    assert listed == found


def test_no_test_module_imports_another():
    """Shared builders live in tests/helpers/ (``helpers.<module>``), fixtures in conftest.py: a test
    module that imported another (or conftest) would run its tests' imports and couple their layouts."""
    tests = REPO / "tests"
    own = {path.stem for path in tests.glob("*.py")}  # test modules, conftest and the worker scripts
    offenders = {}
    for path in [*tests.glob("*.py"), *(tests / "helpers").glob("*.py")]:
        found = {
            name.split(".")[0]
            for name in _imports(path.stem, path, set())
            if name.split(".")[0] in own and name.split(".")[0] != path.stem
        }
        if found:
            offenders[str(path.relative_to(REPO))] = sorted(found)
    assert offenders == {}


def test_moved_modules_import_from_their_old_path_with_a_warning():
    """One release of grace: ``lite_ppo.module`` (a user's import, a class_path, a pickled reference) is
    the module at its new path, and says where that is."""
    import subprocess

    from lite_ppo._moved import MOVED

    code = (
        "import importlib, warnings\n"
        "from lite_ppo._moved import MOVED\n"
        "warnings.simplefilter('error')\n"
        "for old, new in MOVED.items():\n"
        "    try:\n"
        "        importlib.import_module(old)\n"
        "    except FutureWarning as w:\n"
        "        assert new in str(w), (old, str(w))\n"
        "    else:\n"
        "        raise AssertionError(f'{old}: no warning')\n"
        "warnings.simplefilter('ignore')\n"
        "for old, new in MOVED.items():\n"
        "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
        "from lite_ppo.module import LitePPO\n"
        "from lite_ppo.training.module import LitePPO as Same\n"
        "assert LitePPO is Same\n"
        "print('ok', len(MOVED))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", str(len(MOVED))]
    assert all(not (REPO / "src" / (old.replace(".", "/") + ".py")).exists() for old in MOVED)


def module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports at run time (package ``__init__`` files left out:
    they re-export, and Python runs them before any of their modules anyway)."""
    modules = _modules()
    plain = {name for name, path in modules.items() if path.name != "__init__.py"}
    return {name: (_imports(name, modules[name], set(modules)) & plain) - {name} for name in plain}


def test_no_module_imports_itself_back():
    """No import cycle between modules, function-level imports included (a lazy import that hides a
    cycle is still one: data/synthetic.py and data/testbed.py had one)."""
    graph = module_graph()
    cycles = sorted(name for name in graph if name in _reachable(graph, name))
    assert not cycles, f"modules on an import cycle: {cycles}"


def _technique_imports() -> dict[str, list[str]]:
    """For every shipped callback file that defines a technique: what it imports of training, research
    and the command line (above the declared interface: ``lite_ppo.technique``, ``policy_module``,
    ``step_context``)."""
    modules = _modules()
    found = {}
    for name, path in modules.items():
        if not name.startswith("lite_ppo.callbacks.") or "(Technique)" not in path.read_text(encoding="utf-8"):
            continue
        found[name] = sorted(
            m
            for m in _imports(name, path, set(modules))
            if m.startswith(("lite_ppo.training", "lite_ppo.research", "lite_ppo.cli"))
        )
    return found


def test_techniques_import_only_the_declared_interface_of_the_module():
    """A technique reaches the module through ``ctx`` and ``PolicyModule`` (what test_hook_contract checks
    member by member), never through the training package, whose insides may change."""
    found = _technique_imports()
    assert len(found) >= 15, sorted(found)  # the shipped techniques were found
    assert {name: imports for name, imports in found.items() if imports} == {}
