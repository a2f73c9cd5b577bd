"""Every command in the README's code blocks still runs as written: the LightningCLI ones compose
(``--print_config``: every config file, key and class path resolves), ``lite-ppo data list`` runs,
the make targets exist, and the benchmark scripts exist with the options the README gives them."""

from __future__ import annotations

import re
import shlex

import pytest

from helpers.paths import REPO

LIGHTNING_COMMANDS = ("fit", "validate", "test")


def bash_lines(path) -> list[str]:
    """The command lines of a Markdown file's ``bash`` blocks: continuation lines joined, comments dropped."""
    text = path.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]
    return lines


def readme_commands() -> list[str]:
    return bash_lines(REPO / "README.md")


def _without_optional(line: str) -> list[str]:
    """argv of ``line`` with its ``[--option VALUE]`` placeholders left out."""
    return shlex.split(re.sub(r"\[[^\]]*\]", "", line))


def test_the_readme_has_the_commands_this_file_checks():
    commands = readme_commands()
    assert sum(line.startswith("lite-ppo fit ") for line in commands) >= 3
    assert any(line.startswith("make train") for line in commands)
    assert any(line.startswith(".venv/bin/python benchmarks/") for line in commands)


@pytest.mark.parametrize(
    "line",
    [
        line
        for line in readme_commands()
        if line.split()[:2][-1] in LIGHTNING_COMMANDS and line.startswith("lite-ppo") and "..." not in line
    ],
)
def test_readme_lightning_command_composes(line, capsys, monkeypatch):
    from lite_ppo.cli import main

    monkeypatch.chdir(REPO)  # the README's paths are relative to the checkout
    argv = _without_optional(line)[1:]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--print_config"])
    assert done.value.code in (0, None), capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "model_path:" in printed and "class_path:" in printed  # the merged config, not an error


def test_readme_data_list_runs(capsys):
    from lite_ppo.cli import main

    (line,) = [line for line in readme_commands() if line.startswith("lite-ppo data ")]
    with pytest.raises(SystemExit) as done:
        main(shlex.split(line)[1:])
    assert done.value.code in (0, None)
    assert "gsm8k" in capsys.readouterr().out


def test_readme_make_targets_exist():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.MULTILINE))
    used = {line.split()[1] for line in readme_commands() if line.startswith("make ")}
    assert used and used <= targets


def test_readme_benchmark_scripts_take_the_options_it_shows():
    for line in readme_commands():
        if not line.startswith(".venv/bin/python benchmarks/"):
            continue
        argv = shlex.split(line)
        script = REPO / argv[1]
        assert script.is_file(), line
        source = script.read_text(encoding="utf-8")
        for option in [a for a in argv[2:] if a.startswith("--")]:
            assert f'"{option}"' in source, f"{line}: {script.name} has no option {option}"


def test_the_docs_benchmark_commands_take_the_options_they_show():
    """The docs' ``python benchmarks/...`` lines (CONTRIBUTING.md, docs/): the script exists and defines
    every option the line gives it, so a renamed option cannot leave a protocol's command stale."""
    docs = [REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
    checked = 0
    for doc in docs:
        for line in bash_lines(doc):
            found = re.match(r"^(?:\.venv/bin/)?python (benchmarks/\S+)(.*)$", line)
            if not found:
                continue
            script = REPO / found.group(1)
            assert script.is_file(), f"{doc.name}: {line}"
            source = script.read_text(encoding="utf-8")
            for option in [a.split("=", 1)[0] for a in shlex.split(found.group(2)) if a.startswith("--")]:
                assert f'"{option}"' in source, f"{doc.name}: {line}: {script.name} has no option {option}"
            checked += 1
    assert checked >= 10  # the docs' protocols run benchmark scripts; none found means the parsing broke


def test_readme_names_every_shipped_recipe_and_technique():
    """The README's lists of recipes and techniques are complete: a recipe or technique added without a
    word there fails here."""
    import inspect

    import lite_ppo.callbacks as callbacks
    from lite_ppo.technique import Technique

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    recipes = sorted(p.stem for p in (REPO / "configs/recipes").glob("*.yaml"))
    assert [r for r in recipes if f"`{r}`" not in readme] == []
    techniques = sorted(
        name
        for name, obj in vars(callbacks).items()
        if inspect.isclass(obj) and issubclass(obj, Technique) and obj is not Technique
    )
    assert len(techniques) >= 15 and [t for t in techniques if f"`{t}`" not in readme] == []
