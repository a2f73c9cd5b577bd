"""The ``--help`` cache of ``lite-ppo fit|validate|test`` (``lite_ppo.cli.help_cache``): the key changes
with everything the help text depends on, a corrupt entry falls back to the real help, and the
cached text is byte for byte the text of the real (uncached) help on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import lite_ppo
from helpers.paths import REPO
from lite_ppo.cli import help_cache
from lite_ppo.cli.help_cache import cache_key, config_files, lookup, serve, store


# ------------------------------------------------------------------ which requests are served
def test_only_plain_help_requests_are_cacheable() -> None:
    assert config_files(["--help"]) == []
    assert config_files(["-h"]) == []
    assert config_files(["--config", "a.yaml", "-c", "b.yaml", "--config=c.yaml", "--help"]) == [
        "a.yaml",
        "b.yaml",
        "c.yaml",
    ]
    for args in (
        [],
        ["--config", "a.yaml"],
        ["--help", "--config", "a.yaml"],
        ["--model.lr", "1", "--help"],
        ["--config", "--help"],
        ["--print_config"],
        ["--help", "--help", "x"],
    ):
        assert config_files(args) is None, args


# ------------------------------------------------------------------ the key
@pytest.fixture()
def world(tmp_path: Path) -> dict:
    """A source tree, an installed distribution, a config naming a nested config: all in tmp_path."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "module.py").write_text("x = 1\n")
    site = tmp_path / "site"
    (site / "foo-1.0.dist-info").mkdir(parents=True)
    nested = tmp_path / "nested.yaml"
    nested.write_text("lr: 0.1\n")
    config = tmp_path / "recipe.yaml"
    technique = "lite_ppo.callbacks.LossAggregation"
    config.write_text(f"model:\n  lr: 0.1\ndata: {nested}\ntrainer:\n  callbacks:\n    - class_path: {technique}\n")
    return {"src": src, "site": site, "nested": nested, "config": config}


def _key(
    world: dict, command: str = "fit", args: list[str] | None = None, width: int = 80, env: dict | None = None
) -> str | None:
    args = ["--config", str(world["config"]), "--help"] if args is None else args
    return cache_key(
        command,
        args,
        prog="lite-ppo",
        width=width,
        encoding="utf-8",
        environ={"HOME": "/h", **(env or {})},
        search_path=[str(world["site"])],
        roots=[world["src"]],
    )


def test_key_changes_with_everything_the_help_depends_on(world: dict) -> None:
    base = _key(world)
    assert base is not None and base == _key(world), "the key is deterministic"
    seen = {base}

    def changed(key: str | None, what: str) -> None:
        assert key is not None and key not in seen, what
        seen.add(key)

    changed(_key(world, command="validate"), "command")
    changed(_key(world, args=["--help"]), "arguments")
    changed(_key(world, width=120), "terminal width")
    changed(_key(world, env={"LITE_PPO_CACHE": "/elsewhere"}), "a LITE_PPO_ variable")
    changed(_key(world, env={"PL_TRAINER_ACCELERATOR": "cpu"}), "a Lightning variable")
    assert _key(world, env={"EDITOR": "vi", help_cache.OFF_ENV: "1"}) == base, (
        "unrelated variables and the on/off switch are not in the key"
    )

    world["config"].write_text(world["config"].read_text().replace("0.1", "0.2"))  # same size, other content
    changed(_key(world), "config content")
    world["nested"].write_text("lr: 0.25\n")
    changed(_key(world), "a file the config names")
    (world["src"] / "module.py").write_text("x = 12\n")
    changed(_key(world), "a source file")
    (world["src"] / "new.py").write_text("")
    changed(_key(world), "a new source file")
    (world["site"] / "foo-1.0.dist-info").rename(world["site"] / "foo-1.1.dist-info")
    changed(_key(world), "an upgraded distribution")


def test_requests_the_key_cannot_cover_are_not_cached(world: dict, tmp_path: Path) -> None:
    assert _key(world, args=["--model.lr", "1", "--help"]) is None
    assert _key(world, args=["--config", str(tmp_path / "missing.yaml"), "--help"]) is None
    assert _key(world, env={help_cache.OFF_ENV: "0"}) is None
    assert _key(world, env={"JSONARGPARSE_DEFAULT_ENV": "true"}) is None
    user_class = tmp_path / "user.yaml"
    user_class.write_text("trainer:\n  callbacks:\n    - class_path: my_project.MyTechnique\n")
    assert _key(world, args=["--config", str(user_class), "--help"]) is None


def test_source_roots_are_the_package_and_the_callbacks_folder() -> None:
    roots = help_cache.source_roots()
    assert Path(lite_ppo.__file__).resolve().parent in roots
    if (REPO / "callbacks" / "__init__.py").is_file():  # a checkout: lite_ppo.callbacks is callbacks/
        assert (REPO / "callbacks").resolve() in roots


# ------------------------------------------------------------------ entries
def test_stored_entries_round_trip_and_corrupt_ones_are_ignored(tmp_path: Path) -> None:
    key, other = "a" * 64, "b" * 64
    text = "usage: lite-ppo fit ...\n  --model.lr LR  (type: float, default: 1e-06)  é\n".encode()
    assert lookup(key, tmp_path) is None
    store(key, text, tmp_path)
    assert lookup(key, tmp_path) == text
    entry = tmp_path / f"{key}.txt"
    raw = entry.read_bytes()
    for corrupt in (raw[:-5], raw.replace(b"1e-06", b"1e-07"), b"garbage", b"", raw.replace(b"cache 1", b"cache 9")):
        entry.write_bytes(corrupt)
        assert lookup(key, tmp_path) is None, corrupt[:60]
    entry.write_bytes(raw)
    entry.rename(tmp_path / f"{other}.txt")  # an entry under another name is not that key's
    assert lookup(other, tmp_path) is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    store(key, text, blocker / "help")  # a folder that cannot be made: no error, nothing stored
    assert lookup(key, blocker / "help") is None


def test_serve_stores_then_replays_and_falls_back_on_a_corrupt_entry(tmp_path: Path, monkeypatch, capfd) -> None:
    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "91")
    monkeypatch.setattr(sys, "orig_argv", ["/venv/bin/python", "/venv/bin/lite-ppo", "fit", "--help"])
    monkeypatch.setattr(sys, "argv", ["/venv/bin/lite-ppo", "fit", "--help"])
    calls = []

    def real(command_line, width, stdout=b"usage: lite-ppo fit [-h]\n", stderr=b"", code=0):
        calls.append((list(command_line), width))
        return subprocess.CompletedProcess(command_line, code, stdout, stderr)

    assert serve("fit", ["--model.lr", "1", "--help"], real) is None  # not a plain help: the caller runs it
    assert serve("evaluate", ["--help"], real) is None
    assert serve("fit", ["--help"], real) == 0
    assert calls == [([sys.executable, "/venv/bin/lite-ppo", "fit", "--help"], 91)]
    assert capfd.readouterr().out == "usage: lite-ppo fit [-h]\n"
    assert serve("fit", ["--help"], real) == 0 and len(calls) == 1, "the second call is served from the cache"
    assert capfd.readouterr().out == "usage: lite-ppo fit [-h]\n"

    (entry,) = (tmp_path / "help").glob("*.txt")
    entry.write_bytes(entry.read_bytes()[:-3])
    assert serve("fit", ["--help"], real) == 0 and len(calls) == 2, "a corrupt entry runs the real help again"
    assert capfd.readouterr().out == "usage: lite-ppo fit [-h]\n"

    entry.unlink()
    assert serve("fit", ["--help"], lambda c, w: real(c, w, stderr=b"UserWarning: x\n")) == 0
    assert serve("fit", ["--help"], lambda c, w: real(c, w, code=2, stderr=b"error\n")) == 2
    assert not list((tmp_path / "help").glob("*.txt")), "a help with warnings or an error is not stored"
    assert capfd.readouterr().err == "UserWarning: x\nerror\n"


# ------------------------------------------------------------------ the real thing, on a terminal
def _on_terminal(argv: list[str], env: dict[str, str], columns: int = 100) -> tuple[int, bytes]:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal ``columns`` wide; (status, output)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in {**os.environ, **env}.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=REPO)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=300), b"".join(chunks)


@pytest.mark.slow
@pytest.mark.extended
def test_cached_help_is_byte_identical_to_the_real_help(tmp_path: Path) -> None:
    """Two processes build LightningCLI's parser (~6 s each): the uncached help and the first cached
    call (which runs it once more in a child, ~12 s together); the third call reads the cache."""
    script = str(Path(sys.executable).with_name("lite-ppo"))
    cache = {"LITE_PPO_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    real = _on_terminal([script, "fit", "--help"], {**cache, help_cache.OFF_ENV: "0"})
    first = _on_terminal([script, "fit", "--help"], cache)
    (entry,) = (tmp_path / "help").glob("*.txt")
    second = _on_terminal([script, "fit", "--help"], cache)
    assert real[0] == first[0] == second[0] == 0
    assert b"--model.lr" in real[1] and b"Traceback" not in real[1]
    # Help texts (indented 24) wrap at 98 columns, not at the 78 of a pipe: the terminal's width was used.
    assert any(line.startswith(b" " * 24) and 80 < len(line) <= 98 for line in real[1].split(b"\r\n"))
    assert first[1] == real[1]
    assert second[1] == real[1]
    # The third call printed the stored entry (not the real help): a valid entry with other text shows.
    store(entry.stem, b"stored text\n", tmp_path / "help")
    assert _on_terminal([script, "fit", "--help"], cache) == (0, b"stored text\r\n")
