"""Every YAML example in a docstring of the package or a shipped callback is a config `lite-ppo fit`
takes: composed after a recipe and the smoke model with ``--print_config``, each of its keys and class
paths resolves. (Three did not: ``model: {class_path, init_args}`` and ``model: init_args: lora:`` are
shapes the CLI refuses.)"""

from __future__ import annotations

import ast
import re
import textwrap

import pytest
import yaml

from helpers.paths import REPO

CONFIG_SECTIONS = {"model", "data", "rollout", "trainer", "console", "reliability", "seed_everything"}


def docstring_config_examples() -> list[tuple[str, str]]:
    """``(where, yaml text)`` of each ``Example...::`` block whose first line is a config section."""
    found = []
    for path in sorted([*REPO.glob("src/lite_ppo/**/*.py"), *REPO.glob("callbacks/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                continue
            lines = (ast.get_docstring(node, clean=True) or "").splitlines()
            for i, line in enumerate(lines):
                heading = line if i == 0 else lines[i - 1] + " " + line
                if not (line.rstrip().endswith("::") and "Example" in heading):
                    continue
                block = []
                for following in lines[i + 1 :]:
                    if following.strip() and not following.startswith(" "):
                        break
                    block.append(following)
                text = textwrap.dedent("\n".join(block)).strip("\n")
                section = re.match(r"(\w+):", text)
                if section and section.group(1) in CONFIG_SECTIONS:
                    where = f"{path.relative_to(REPO)}:{getattr(node, 'name', 'module')}"
                    found.append((where, text))
    return found


EXAMPLES = docstring_config_examples()


def test_the_examples_are_found():
    # LitePPO, MathDataModule, the Rollout callback and the techniques each show one.
    where = {w.split(":")[1] for w, _ in EXAMPLES}
    assert {"LitePPO", "MathDataModule", "Rollout", "ClipHigher", "DynamicSampling"} <= where


@pytest.mark.parametrize("where,text", EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_a_docstring_example_is_a_config_fit_takes(where, text, tmp_path, capsys):
    from lite_ppo.cli import main

    yaml.safe_load(text)  # YAML first, for a clear failure
    example = tmp_path / "example.yaml"
    example.write_text(text + "\n", encoding="utf-8")
    recipe, model = REPO / "configs/recipes/lite_ppo.yaml", REPO / "configs/models/tiny.yaml"
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(recipe), "--config", str(model), "--config", str(example), "--print_config"])
    assert done.value.code in (0, None), f"{where}: {capsys.readouterr().err.strip()}"


def _package_modules() -> list[str]:
    import pkgutil

    import lite_ppo

    skip = ("__main__", ".worker")  # entry points: importing them starts nothing, but they hold no examples
    return [m.name for m in pkgutil.walk_packages(lite_ppo.__path__, "lite_ppo.") if not m.name.endswith(skip)]


@pytest.mark.parametrize("name", _package_modules())
def test_the_python_examples_of_a_module_run_as_written(name):
    """The ``>>>`` examples of every module of the package give what they show (``# doctest: +SKIP`` marks
    the ones that need a model or a run folder). Two had gone stale unseen: compare's key order had
    changed, and a SKIP sat on an output line."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples fail (output above)"
