"""Every ``lite-ppo sweep`` command of docs/takeaways.md and docs/transfer.md parses and expands its grid
without running: run as written (backslash continuations joined, ``$(seq A B)`` expanded, paths from the
repository root, a time box ``--no-start-after`` left out: SLURM starts the runs) with ``--emit-slurm``, each
writes one launch script per grid point whose ``fit`` arguments resolve every config file and factor
fragment it names."""

from __future__ import annotations

import re
import shlex

import pytest

from helpers.paths import REPO
from lite_ppo.research.sweep import main as sweep_main

DOC = REPO / "docs/takeaways.md"
DOCS = (DOC, REPO / "docs/transfer.md")


def _sweep_commands(docs=DOCS) -> list[str]:
    commands = []
    for doc in docs:
        blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(), flags=re.DOTALL)
        for block in blocks:
            joined = block.replace("\\\n", " ")
            commands += [line.strip() for line in joined.splitlines() if line.strip().startswith("lite-ppo sweep")]
    return commands


def _expand(command: str) -> list[str]:
    seq = lambda m: " ".join(str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1))  # noqa: E731
    return shlex.split(re.sub(r"\$\(seq (\d+) (\d+)\)", seq, command))[2:]  # after "lite-ppo sweep"


def test_the_doc_has_sweep_commands():
    commands = _sweep_commands([DOC])
    assert len(commands) >= 6 and any("--seed $(seq 0 15)" in c for c in commands)


@pytest.mark.parametrize("command", _sweep_commands())
def test_a_doc_sweep_command_expands_its_grid(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    args = _expand(command)
    if "--no-start-after" in args:  # a time box for runs started here; refused with --emit-slurm
        cut = args.index("--no-start-after")
        args = args[:cut] + args[cut + 2 :]
    out = tmp_path / "runs"
    args = [a if not a.startswith("runs/") else str(out) for a in args]  # --out into the test's folder
    emit = tmp_path / "slurm"
    assert sweep_main([*args, "--emit-slurm", str(emit)]) == 0, capsys.readouterr()
    scripts = sorted(emit.glob("*.sh"))
    seeds = 1
    if "--seed" in args:
        rest = args[args.index("--seed") + 1 :]
        seeds = next((i for i, a in enumerate(rest) if a.startswith("-")), len(rest))
    only = {args[i + 1].split("=", 1)[0] for i, arg in enumerate(args) if arg == "--only"}  # one level each
    levels = 1
    for i, arg in enumerate(args):
        if arg == "--factor":
            name, spec = args[i + 1].split("=", 1)
            levels *= 1 if name in only else len(spec.split(","))
        if arg == "--grid-config":
            levels *= len(args[i + 1].split(","))
    recipes = 1
    if "--recipe" in args:
        rest = args[args.index("--recipe") + 1 :]
        recipes = next((i for i, a in enumerate(rest) if a.startswith("-")), len(rest))
    assert len(scripts) == recipes * seeds * levels, [s.name for s in scripts]
    for script in scripts:
        words = shlex.split(script.read_text().splitlines()[-1])
        files = [w for prev, w in zip(words, words[1:]) if prev == "--config" and not w.startswith("{")]
        assert files and all((REPO / f).is_file() for f in files), files
