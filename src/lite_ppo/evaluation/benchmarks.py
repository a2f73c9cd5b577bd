"""Benchmarks: which evaluation files exist, where they live, and how to load them.

A benchmark is a JSONL file in the shared data schema (``id``, ``problem``, ``answer``,
``source``; shared/data/README.md) plus a short name used in metric keys
(``eval/<name>/accuracy``), a display title and whether it counts in the paper's average.
The files are never shipped with the project: a user points ``data_dir`` at the folder that holds
them (``--data-dir`` on the command, ``data_dir:`` in YAML, or ``$LITE_PPO_EVAL_DIR``).

The registry :data:`DEFAULT_BENCHMARKS` lists the paper's six benchmarks (their unweighted mean
is the paper's "average") plus GSM8K test, which is reported but kept out of the average.
``configs/eval/benchmarks.yaml`` is the same list as YAML.

Example:
    >>> specs, data_dir = load_benchmark_config(None)
    >>> [s.name for s in specs][:3], data_dir
    (['math500', 'aime24', 'aime25'], None)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from lite_ppo.data.jsonl import load_problems
from lite_ppo.data.problem import Problem

ENV_DATA_DIR = "LITE_PPO_EVAL_DIR"
RESERVED_NAMES = ("average", "weighted_average")
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


@dataclass(frozen=True)
class BenchmarkSpec:
    """One evaluation benchmark.

    Args:
        name: key in metric names (``eval/<name>/accuracy``); letters, digits, ``_`` and ``-``.
        file: the JSONL (or Parquet) file, relative to the data folder or absolute.
        title: display name in tables (default: ``name``).
        limit: evaluate only the first ``limit`` problems (None: all).
        in_average: counts in the ``average`` / ``weighted_average`` rows.

    Example:
        >>> BenchmarkSpec("math500", "math500.jsonl", title="MATH-500", limit=100).display
        'MATH-500'
    """

    name: str
    file: str
    title: str | None = None
    limit: int | None = None
    in_average: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"benchmark name {self.name!r} must be non-empty and use only letters, digits, '_' and '-'")
        if self.name in RESERVED_NAMES:
            raise ValueError(f"benchmark name {self.name!r} is reserved for the averages; choose another")
        if not isinstance(self.file, str) or not self.file:
            raise ValueError(f"benchmark {self.name!r}: 'file' must be a non-empty path")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise ValueError(f"benchmark {self.name!r}: 'limit' must be an integer >= 1 or null, got {self.limit!r}")

    @property
    def display(self) -> str:
        return self.title or self.name


DEFAULT_BENCHMARKS: tuple[BenchmarkSpec, ...] = (
    BenchmarkSpec("math500", "math500.jsonl", "MATH-500"),
    BenchmarkSpec("aime24", "aime24.jsonl", "AIME24"),
    BenchmarkSpec("aime25", "aime25.jsonl", "AIME25"),
    BenchmarkSpec("amc23", "amc23.jsonl", "AMC23"),
    BenchmarkSpec("minerva_math", "minerva_math.jsonl", "MinervaMath"),
    BenchmarkSpec("olympiadbench", "olympiadbench.jsonl", "OlympiadBench"),
    BenchmarkSpec("gsm8k", "gsm8k_test.jsonl", "GSM8K", in_average=False),
)
_BY_NAME = {spec.name: spec for spec in DEFAULT_BENCHMARKS}


def spec_from_mapping(entry: Any, where: str) -> BenchmarkSpec:
    """Build a :class:`BenchmarkSpec` from a YAML mapping, naming ``where`` in every error.

    An entry may also be a bare registry name (``"math500"``).

    Example:
        >>> spec_from_mapping({"name": "gsm8k", "file": "gsm8k_test.jsonl", "limit": 50}, "cfg[0]").limit
        50
        >>> spec_from_mapping("aime24", "cfg[1]").file
        'aime24.jsonl'
    """
    if isinstance(entry, str):
        if entry not in _BY_NAME:
            raise ValueError(f"{where}: unknown benchmark {entry!r}; known: {', '.join(_BY_NAME)} (or give a mapping with name and file)")
        return _BY_NAME[entry]
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected a mapping {{name, file, title?, limit?, in_average?}}, got {type(entry).__name__}")
    allowed = {f.name for f in fields(BenchmarkSpec)}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    values = dict(entry)
    # A registry name with no file takes the registry's file (and title).
    if "file" not in values and values.get("name") in _BY_NAME:
        base = _BY_NAME[values["name"]]
        values = {**{f.name: getattr(base, f.name) for f in fields(BenchmarkSpec)}, **values}
    for key in ("name", "file"):
        if key not in values:
            raise ValueError(f"{where}: '{key}' is missing")
    try:
        return BenchmarkSpec(**values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None


def parse_benchmark_list(entries: Any, where: str) -> list[BenchmarkSpec]:
    """Specs from a list of mappings / registry names; names must be unique."""
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)) or not entries:
        raise ValueError(f"{where}: expected a non-empty list of benchmarks")
    specs = [spec_from_mapping(entry, f"{where}[{i}]") for i, entry in enumerate(entries)]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ValueError(f"{where}: benchmark name {spec.name!r} appears twice")
        seen.add(spec.name)
    return specs


def load_benchmark_config(source: str | os.PathLike[str] | Sequence[Any] | None) -> tuple[list[BenchmarkSpec], str | None]:
    """The benchmarks and the configured data folder (None when the config names none).

    Args:
        source: ``None`` (the registry), a YAML file (``{data_dir?, benchmarks: [...]}`` or a bare
            list), a comma-separated list of registry names (``"math500,gsm8k"``), a list of
            mappings / registry names, or an empty list (no benchmarks: only the held-out split of
            the training tiers is evaluated, which needs no files).

    Example:
        >>> [s.name for s in load_benchmark_config("aime24,amc23")[0]]
        ['aime24', 'amc23']
    """
    if source is None:
        return list(DEFAULT_BENCHMARKS), None
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)) and len(source) == 0:
        return [], None
    if isinstance(source, (str, os.PathLike)):
        path = Path(os.path.expanduser(str(source)))
        if path.suffix.lower() in (".yaml", ".yml") or path.exists():
            return _load_yaml(path)
        return parse_benchmark_list([name.strip() for name in str(source).split(",") if name.strip()], "benchmarks"), None
    return parse_benchmark_list(source, "benchmarks"), None


def _load_yaml(path: Path) -> tuple[list[BenchmarkSpec], str | None]:
    import yaml

    if not path.is_file():
        raise FileNotFoundError(f"benchmark config {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: invalid YAML ({error})") from None
    if isinstance(data, list):
        return parse_benchmark_list(data, f"{path}"), None
    if not isinstance(data, Mapping) or "benchmarks" not in data:
        raise ValueError(f"{path}: expected a mapping with a 'benchmarks' list (and optionally 'data_dir')")
    unknown = sorted(set(data) - {"benchmarks", "data_dir"})
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: benchmarks, data_dir")
    data_dir = data.get("data_dir")
    if data_dir is not None and not isinstance(data_dir, str):
        raise ValueError(f"{path}: 'data_dir' must be a path string or null")
    return parse_benchmark_list(data["benchmarks"], f"{path}: benchmarks"), data_dir


def resolve_data_dir(explicit: str | os.PathLike[str] | None, configured: str | None = None) -> Path:
    """The folder holding the benchmark files: the explicit argument, else the config's
    ``data_dir``, else ``$LITE_PPO_EVAL_DIR``. Fails with a message saying how to give it."""
    for value in (explicit, configured, os.environ.get(ENV_DATA_DIR)):
        if value:
            path = Path(os.path.expanduser(str(value)))
            if not path.is_dir():
                raise FileNotFoundError(f"benchmark data folder {str(path)!r} does not exist")
            return path
    raise ValueError(
        "no benchmark data folder given: pass --data-dir (command), data_dir (Evaluation callback or the "
        f"benchmark YAML), or set ${ENV_DATA_DIR}; the files are not shipped with the project"
    )


def apply_limit(specs: Sequence[BenchmarkSpec], limit: int | None) -> list[BenchmarkSpec]:
    """Cap every benchmark at ``limit`` problems (the smaller of it and a spec's own limit)."""
    if limit is None:
        return list(specs)
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    return [replace(s, limit=limit if s.limit is None else min(s.limit, limit)) for s in specs]


def load_benchmark(spec: BenchmarkSpec, data_dir: str | os.PathLike[str] | None) -> list[Problem]:
    """The first ``spec.limit`` problems of the benchmark file, tier set to the benchmark name.

    Raises:
        FileNotFoundError: the file does not exist (the message names the file and the benchmark).
        DataFormatError: a malformed line (``<file>:<line>: <what is wrong>``).
    """
    path = Path(os.path.expanduser(spec.file))
    if not path.is_absolute() and data_dir is not None:
        path = Path(data_dir) / path
    if not path.is_file():
        raise FileNotFoundError(f"benchmark {spec.name!r}: file {str(path)!r} does not exist (check data_dir / --data-dir)")
    problems = load_problems(path, tier=spec.name)
    if not problems:
        raise ValueError(f"benchmark {spec.name!r}: file {str(path)!r} holds no problems")
    return problems[: spec.limit] if spec.limit is not None else problems


def load_benchmarks(specs: Sequence[BenchmarkSpec], data_dir: str | os.PathLike[str] | None) -> list[tuple[BenchmarkSpec, list[Problem]]]:
    """Load every benchmark (all files are read, so every missing file fails up front)."""
    return [(spec, load_benchmark(spec, data_dir)) for spec in specs]
