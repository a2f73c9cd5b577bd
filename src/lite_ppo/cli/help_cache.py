"""A cache of the ``--help`` text of ``lite-ppo fit|validate|test``, so that it answers in a fraction
of a second instead of the seconds that building LightningCLI's parser costs (``import lightning.pytorch``
alone imports torch, torchmetrics and, through it, transformers; docs/benchmarks.md has the figures).

The first ``lite-ppo fit --help`` runs the real help in a child process (the same command line, cache
off), prints what it printed and stores its stdout under ``$LITE_PPO_CACHE/help`` (else
``$XDG_CACHE_HOME/lite_ppo/help``, else ``~/.cache/lite_ppo/help``); later calls print the stored
bytes without importing Lightning. Only two command-line shapes are served from the cache, exactly
``<command> --help`` (or ``-h``) and ``<command> --config F [--config F ...] --help``; anything else
(other options, a config string instead of a file) takes the real path every time.

A stored text is used only when everything it could depend on is unchanged; the key
(:func:`key_material`) holds:

- the command, its arguments and the program name (``usage: lite-ppo ...``);
- the bytes of every ``--config`` file, and size + mtime of every file those files name (a nested
  config); a config naming a ``class_path`` outside lite_ppo / Lightning / torch is not cached (its
  module could change without the key seeing it);
- size + mtime of every source file of ``lite_ppo`` and ``lite_ppo.callbacks``;
- every installed distribution (name, version and install time of each ``*.dist-info``), the Python
  version, executable and options (``-W``, ``-X``, ...), ``sys.path``;
- the terminal width argparse wraps to, the output encoding, and the environment variables that can
  change what Lightning, jsonargparse, Python or lite-ppo print (``LITE_PPO_*``, ``PL_*``,
  ``JSONARGPARSE_*``, ``PYTHON*``, ``LANG`` / ``LC_*``, ...).

Only a help that exits 0 with nothing on stderr is stored. A missing, unreadable or corrupt entry
(checked by a header with the key and a SHA-256 of the text) falls back to the real path silently.
``LITE_PPO_HELP_CACHE=0`` turns the cache off; ``python -m lite_ppo.cli.help_cache`` fills it for the
three commands at the current terminal width (``make install`` does, so the first call is fast too).

Example::

    lite-ppo fit --help          # first call: builds the parser, stores the text
    lite-ppo fit --help          # the stored text: the same bytes, without the imports
    LITE_PPO_HELP_CACHE=0 lite-ppo fit --help   # always the real path
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any

__all__ = [
    "CACHED_COMMANDS",
    "cache_dir",
    "cache_key",
    "config_files",
    "key_material",
    "lookup",
    "serve",
    "store",
    "warm",
]

CACHED_COMMANDS = ("fit", "validate", "test")
OFF_ENV = "LITE_PPO_HELP_CACHE"
FORMAT = "lite-ppo help cache 1"  # first header field; bump it when the key or the file layout changes
MAX_ENTRIES = 32  # oldest entries beyond this are deleted when one is stored

HELP_FLAGS = ("-h", "--help")
CONFIG_FLAGS = ("-c", "--config")
# Environment variables that can change what the help prints: its values, wrapping, warnings, encoding.
ENV_PREFIXES = (
    "LITE_PPO_",
    "PL_",
    "LIGHTNING_",
    "POSSIBLE_USER_WARNINGS",
    "JSONARGPARSE_",
    "PYTHON",
    "TORCH",
    "TRANSFORMERS_",
    "HF_",
    "LANG",
    "LC_",
)
# With these set the output depends on more than the key can see (environment parsing, shell completion).
NO_CACHE_ENV = ("JSONARGPARSE_DEFAULT_ENV", "_ARGCOMPLETE")
# A config's class_path whose module the key covers (the project's sources, the installed distributions).
KNOWN_MODULES = ("lite_ppo.", "lightning.", "pytorch_lightning.", "torch.")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$LITE_PPO_CACHE/help``, else ``$XDG_CACHE_HOME/lite_ppo/help``, else ``~/.cache/lite_ppo/help``."""
    environ = os.environ if environ is None else environ
    if environ.get("LITE_PPO_CACHE"):
        return Path(environ["LITE_PPO_CACHE"]).expanduser() / "help"
    base = environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "lite_ppo" / "help"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    if environ.get(OFF_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not any(name in environ for name in NO_CACHE_ENV)


def config_files(args: Sequence[str]) -> list[str] | None:
    """The config files of a cacheable help request (``args`` = what follows the command name), or
    None when ``args`` is not exactly ``[--config F ...] --help``.

        >>> config_files(["--help"]), config_files(["-c", "a.yaml", "--config=b.yaml", "-h"])
        ([], ['a.yaml', 'b.yaml'])
        >>> config_files(["--model.lr", "1", "--help"]) is None
        True
    """
    if not args or args[-1] not in HELP_FLAGS:
        return None
    files, rest = [], list(args[:-1])
    while rest:
        flag = rest.pop(0)
        if flag.startswith("--config="):
            files.append(flag.split("=", 1)[1])
        elif flag in CONFIG_FLAGS and rest:
            files.append(rest.pop(0))
        else:
            return None
    return files


def source_roots() -> list[Path]:
    """The folders of ``lite_ppo`` and ``lite_ppo.callbacks`` (the top-level ``callbacks/`` in a
    checkout), found without importing the callbacks."""
    import importlib.util

    roots = [Path(__file__).resolve().parents[1]]  # lite_ppo/ (this file is lite_ppo/cli/help_cache.py)
    spec = importlib.util.find_spec("lite_ppo.callbacks")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location).resolve()
        if path not in roots:
            roots.append(path)
    return roots


def _tree_fingerprint(root: Path) -> list[tuple[str, int, int]]:
    rows = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith((".py", ".pyi", ".yaml", ".yml", ".json")):
                stat = os.stat(os.path.join(folder, name))
                rows.append((os.path.relpath(os.path.join(folder, name), root), stat.st_size, stat.st_mtime_ns))
    return rows


def _distributions(search_path: Sequence[str]) -> list[tuple[str, int]]:
    """``(folder/name.dist-info, mtime)`` of every installed distribution on ``search_path``."""
    rows = []
    for entry in search_path:
        try:
            with os.scandir(entry or ".") as scan:
                for item in scan:
                    if item.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth")):
                        rows.append((os.path.join(entry, item.name), item.stat().st_mtime_ns))
        except OSError:
            continue
    return sorted(rows)


# A token of a config that may name another file (a nested config); quoted or bare.
_PATH_TOKEN = re.compile(r"""[^\s:'"{}\[\],#=]*[./][^\s:'"{}\[\],#=]*""")
_CLASS_PATH = re.compile(r"""class_path\s*[:=]\s*['"]?([\w.]+)""")


def _config_material(path: str) -> dict[str, Any] | None:
    """The bytes of a config file (hashed) and the files it names; None when it cannot be keyed."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None  # not a file (jsonargparse also takes a config string): the real path decides
    text = data.decode("utf-8", errors="replace")
    if any(not name.startswith(KNOWN_MODULES) for name in _CLASS_PATH.findall(text)):
        return None
    named = {}
    for token in set(_PATH_TOKEN.findall(text)):
        for base in (Path(path).parent, Path.cwd()):
            candidate = (base / token).expanduser() if not token.startswith("~") else Path(token).expanduser()
            try:
                stat = candidate.stat()
            except (OSError, ValueError):
                continue
            if not S_ISREG(stat.st_mode):
                continue  # "." or a run folder: only files are read as nested configs
            named[f"{base}:{token}"] = (stat.st_size, stat.st_mtime_ns)
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "names": sorted(named.items())}


def key_material(
    command: str,
    args: Sequence[str],
    *,
    prog: str,
    width: int,
    encoding: str | None = None,
    environ: Mapping[str, str] | None = None,
    search_path: Sequence[str] | None = None,
    roots: Sequence[Path] | None = None,
) -> dict[str, Any] | None:
    """Everything the help text of ``lite-ppo COMMAND ARGS`` depends on, or None when it is not cacheable."""
    environ = os.environ if environ is None else environ
    files = config_files(args)
    if files is None or not enabled(environ):
        return None
    configs = [_config_material(f) for f in files]
    if any(c is None for c in configs):
        return None
    search_path = sys.path if search_path is None else search_path
    return {
        "format": FORMAT,
        "command": command,
        "args": list(args),
        "prog": prog,
        "configs": configs,
        "width": width,
        "encoding": encoding,
        "env": sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIXES) and k != OFF_ENV),
        "python": [
            sys.version,
            sys.executable,
            list(search_path),
            repr(sys.flags),
            sys.warnoptions,
            sorted(map(str, sys._xoptions.items())),
        ],
        "distributions": _distributions(search_path),
        "sources": [[str(root), _tree_fingerprint(root)] for root in (source_roots() if roots is None else roots)],
    }


def cache_key(command: str, args: Sequence[str], **kwargs: Any) -> str | None:
    """SHA-256 of :func:`key_material` (None when not cacheable)."""
    material = key_material(command, args, **kwargs)
    if material is None:
        return None
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _entry(key: str, directory: Path | None) -> Path:
    return (cache_dir() if directory is None else directory) / f"{key}.txt"


def lookup(key: str, directory: Path | None = None) -> bytes | None:
    """The stored help for ``key``, or None if absent, unreadable or corrupt."""
    path = _entry(key, directory)
    try:
        raw = path.read_bytes()
        header, _, payload = raw.partition(b"\n")
        fmt, stored_key, digest = header.decode("ascii").rsplit(" ", 2)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if fmt != FORMAT or stored_key != key or hashlib.sha256(payload).hexdigest() != digest or not payload:
        return None
    try:
        os.utime(path)  # least recently used entries are the ones pruned
    except OSError:
        pass
    return payload


def store(key: str, payload: bytes, directory: Path | None = None) -> None:
    """Write the entry atomically (a reader sees the old file or the new one); errors are ignored."""
    folder = cache_dir() if directory is None else directory
    try:
        folder.mkdir(parents=True, exist_ok=True)
        header = f"{FORMAT} {key} {hashlib.sha256(payload).hexdigest()}\n".encode("ascii")
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tmp-", delete=False) as tmp:
            tmp.write(header + payload)
        os.replace(tmp.name, _entry(key, folder))
        entries = sorted(folder.glob("*.txt"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def _write(stream: Any, data: bytes) -> None:
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:
        stream.write(data.decode(stream.encoding or "utf-8", errors="replace"))
        stream.flush()


def _real_help(command_line: Sequence[str], width: int) -> subprocess.CompletedProcess:
    """Run the uncached help of ``command_line`` in a child, wrapping to ``width`` like this process."""
    env = {**os.environ, OFF_ENV: "0", "COLUMNS": str(width)}
    return subprocess.run(list(command_line), capture_output=True, env=env, stdin=subprocess.DEVNULL)


def serve(
    command: str,
    args: Sequence[str],
    run_real: Callable[[Sequence[str], int], subprocess.CompletedProcess] = _real_help,
) -> int | None:
    """Answer ``lite-ppo COMMAND ARGS`` from the cache (or run it for real and store it); returns the
    exit status, or None when this is not a cacheable help request of this process's own command line
    (the caller then runs the real path itself)."""
    if command not in CACHED_COMMANDS or sys.stdout is None or config_files(args) is None:
        return None
    # Re-running the process's own command line reproduces it exactly (interpreter flags, argv[0]).
    own = list(getattr(sys, "orig_argv", []))
    if len(own) < len(args) + 1 or own[len(own) - len(args) - 1 :] != [command, *args]:
        return None
    width = shutil.get_terminal_size().columns  # what argparse wraps to
    try:
        key = cache_key(
            command,
            args,
            prog=os.path.basename(sys.argv[0]),
            width=width,
            encoding=getattr(sys.stdout, "encoding", None),
        )
        cached = lookup(key) if key is not None else None
    except Exception:  # noqa: BLE001 (the cache must never break the command: take the real path)
        return None
    if key is None:
        return None
    if cached is not None:
        _write(sys.stdout, cached)
        return 0
    done = run_real([sys.executable, *own[1:]], width)
    _write(sys.stdout, done.stdout)
    _write(sys.stderr, done.stderr)
    if done.returncode == 0 and done.stdout and not done.stderr:
        store(key, done.stdout)
    return done.returncode


def warm(commands: Sequence[str] = CACHED_COMMANDS) -> list[str]:
    """Fill the cache for ``lite-ppo COMMAND --help`` at this terminal's width (80 when there is none)
    by running the installed ``lite-ppo`` script as a user would (so the key is the one a user's call
    computes); returns the commands whose help failed (exit status not 0). Prints nothing."""
    script = Path(sys.executable).with_name("lite-ppo")
    env = {**os.environ, "COLUMNS": str(shutil.get_terminal_size().columns)}
    failed = []
    for command in commands:
        done = subprocess.run([str(script), command, "--help"], capture_output=True, env=env, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            failed.append(command)
    return failed


if __name__ == "__main__":
    failed = warm(sys.argv[1:] or CACHED_COMMANDS)
    if failed:
        print(
            f"lite-ppo: could not cache the help of {', '.join(failed)} (run `lite-ppo {failed[0]} --help` to see why)",
            file=sys.stderr,
        )
