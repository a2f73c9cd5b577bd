"""Benchmarks: which evaluation files exist, where they live, and how to load them.

A benchmark is a JSONL file in the project's schema (``id``, ``problem``, ``answer``, ``source``)
plus a short name used in metric keys (``eval/<name>/accuracy``), a display title and whether it
counts in the paper's average. The built-in benchmarks are registered datasets
(:mod:`lite_ppo.data.registry`): MATH-500 and GSM8K ship with the package, the others are fetched
by name from the Hugging Face Hub (``lite-ppo data fetch NAME``) into the user cache. A data folder
(``--data-dir`` on the command, ``data_dir:`` in YAML, or ``$LITE_PPO_EVAL_DIR``) holding files
named like the registry's (``aime24.jsonl``) wins over both; a custom benchmark names its own file.
A generated tier (``testbed:hard``, ``synthetic:easy``; ``testbed`` / ``synthetic`` for all three) is
the held-out split a training run on that tier evaluates: the first ``limit`` problems (default
:data:`GENERATED_SIZE`) of its held-out stream under ``heldout_seed`` (default 0, the testbed configs'),
so ``lite-ppo evaluate`` scores a checkpoint on exactly the problems its run held out.

:data:`DEFAULT_BENCHMARKS` lists the paper's six benchmarks (their unweighted mean is the paper's
"average"; ``paper`` is their alias) plus GSM8K test, which is reported but kept out of the
average. ``configs/eval/benchmarks.yaml`` is the same list as YAML.

Example:
    >>> specs, data_dir = load_benchmark_config(None)
    >>> [s.name for s in specs][:3], data_dir
    (['math500', 'aime24', 'aime25'], None)
    >>> [s.name for s in load_benchmark_config("paper")[0]]
    ['math500', 'aime24', 'aime25', 'amc23', 'minerva_math', 'olympiadbench']
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from lite_ppo.data import registry
from lite_ppo.data.jsonl import load_problems
from lite_ppo.data.pools import FAMILY_PREFIXES, SyntheticPool
from lite_ppo.data.problem import Problem
from lite_ppo.data.synthetic import TIERS
from lite_ppo.errors import MissingFileError, UserError

ENV_DATA_DIR = "LITE_PPO_EVAL_DIR"
RESERVED_NAMES = ("average", "weighted_average")
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
# A generated tier's default size and held-out seed: the testbed configs' val_size and heldout_seed.
GENERATED_SIZE = 700
GENERATED_HELDOUT_SEED = 0
GENERATED_ALIASES = {family.rstrip(":"): [f"{family}{tier}" for tier in TIERS] for family in FAMILY_PREFIXES}


def is_generated(file: str) -> bool:
    """Whether a benchmark ``file`` names a generated tier (``testbed:hard``) rather than a file."""
    return any(file.startswith(prefix) for prefix in FAMILY_PREFIXES)


@dataclass(frozen=True)
class BenchmarkSpec:
    """One evaluation benchmark.

    Args:
        name: key in metric names (``eval/<name>/accuracy``); letters, digits, ``_`` and ``-``.
        file: the JSONL (``.jsonl.gz``, Parquet) file, relative to the data folder or absolute;
            for a registered dataset the file name looked for in a data folder.
        title: display name in tables (default: ``name``).
        limit: evaluate only the first ``limit`` problems (None: all).
        in_average: counts in the ``average`` / ``weighted_average`` rows.
        dataset: the registered dataset (``lite-ppo data list``) whose rows these are; its
            shipped or cached copy is used unless the data folder holds ``file``.
        heldout_seed: for a generated tier (``file: testbed:hard``): the seed of its held-out split
            (a training run's ``data.heldout_seed``); the size is ``limit`` (default 700).

    Example:
        >>> BenchmarkSpec("math500", "math500.jsonl", title="MATH-500", limit=100).display
        'MATH-500'
    """

    name: str
    file: str
    title: str | None = None
    limit: int | None = None
    in_average: bool = True
    dataset: str | None = None
    heldout_seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise UserError(f"benchmark name {self.name!r} must be non-empty and use only letters, digits, '_' and '-'")
        if self.name in RESERVED_NAMES:
            raise UserError(f"benchmark name {self.name!r} is reserved for the averages; choose another")
        if not isinstance(self.file, str) or not self.file:
            raise UserError(f"benchmark {self.name!r}: 'file' must be a non-empty path")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise UserError(f"benchmark {self.name!r}: 'limit' must be an integer >= 1 or null, got {self.limit!r}")
        if self.dataset is not None and self.dataset not in registry.DATASETS:
            raise UserError(
                f"benchmark {self.name!r}: unknown dataset {self.dataset!r}; known: {', '.join(registry.DATASETS)}"
            )
        if is_generated(self.file):
            family, _, tier = self.file.partition(":")
            if tier not in TIERS:
                close = difflib.get_close_matches(tier, TIERS, n=1)
                raise UserError(
                    f"benchmark {self.name!r}: unknown {family} tier {tier!r}"
                    f"{f' (did you mean {family}:{close[0]}?)' if close else ''}; use one of "
                    f"{', '.join(f'{family}:{t}' for t in TIERS)}"
                )
            if self.dataset is not None:
                raise UserError(f"benchmark {self.name!r}: a generated tier ({self.file}) takes no 'dataset'")
        if self.heldout_seed is not None and (
            not is_generated(self.file) or isinstance(self.heldout_seed, bool) or not isinstance(self.heldout_seed, int)
        ):
            raise UserError(
                f"benchmark {self.name!r}: 'heldout_seed' must be an integer and applies only to a generated tier "
                f"(file: testbed:<tier> or synthetic:<tier>), got {self.heldout_seed!r}"
            )

    @property
    def display(self) -> str:
        return self.title or self.name


DEFAULT_BENCHMARKS: tuple[BenchmarkSpec, ...] = tuple(
    BenchmarkSpec(d.name, d.filename, d.title, in_average=d.in_average, dataset=d.name)
    for d in registry.DATASETS.values()
    if d.role == "eval"
)
_BY_NAME = {spec.name: spec for spec in DEFAULT_BENCHMARKS}


def generated_spec(file: str) -> BenchmarkSpec:
    """The benchmark of a generated tier's held-out split, named ``<family>-<tier>``.

    Example:
        >>> spec = generated_spec("testbed:hard")
        >>> spec.name, spec.heldout_seed, spec.in_average
        ('testbed-hard', 0, False)
    """
    family, _, tier = file.partition(":")
    return BenchmarkSpec(
        f"{family}-{tier}",
        file,
        title=f"{family} {tier} (held out)",
        in_average=False,
        heldout_seed=GENERATED_HELDOUT_SEED,
    )


def spec_from_mapping(entry: Any, where: str) -> BenchmarkSpec:
    """Build a :class:`BenchmarkSpec` from a YAML mapping, naming ``where`` in every error.

    An entry may also be a bare registry name (``"math500"``); a mapping with a registry name and no
    ``file`` is that benchmark with the mapping's changes (``{name: gsm8k, limit: 50}``).

    Example:
        >>> spec_from_mapping({"name": "mine", "file": "mine.jsonl", "limit": 50}, "cfg[0]").limit
        50
        >>> spec_from_mapping("aime24", "cfg[1]").file
        'aime24.jsonl'
    """
    if isinstance(entry, str):
        if is_generated(entry):
            try:
                return generated_spec(entry)
            except UserError as error:
                raise UserError(f"{where}: {error}") from None
        if entry not in _BY_NAME:
            close = difflib.get_close_matches(entry, list(_BY_NAME), n=1)
            raise UserError(
                f"{where}: unknown benchmark {entry!r}{f' (did you mean {close[0]!r}?)' if close else ''}; known: "
                f"{', '.join(_BY_NAME)}, testbed:<tier>, synthetic:<tier> (or give a mapping with name and file)"
            )
        return _BY_NAME[entry]
    if not isinstance(entry, Mapping):
        raise UserError(
            f"{where}: expected a mapping {{name, file, title?, limit?, in_average?}}, got {type(entry).__name__}"
        )
    allowed = {f.name for f in fields(BenchmarkSpec)}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    values = dict(entry)
    # A registry name with no file takes the registry's file (and title).
    if "file" not in values and values.get("name") in _BY_NAME:
        base = _BY_NAME[values["name"]]
        values = {**{f.name: getattr(base, f.name) for f in fields(BenchmarkSpec)}, **values}
    # A generated tier keeps the testbed's held-out seed and stays out of the paper's average unless told.
    if isinstance(values.get("file"), str) and is_generated(values["file"]):
        values = {"heldout_seed": GENERATED_HELDOUT_SEED, "in_average": False, **values}
    for key in ("name", "file"):
        if key not in values:
            raise UserError(f"{where}: '{key}' is missing")
    try:
        return BenchmarkSpec(**values)
    except (TypeError, ValueError) as error:
        raise UserError(f"{where}: {error}") from None


def parse_benchmark_list(entries: Any, where: str) -> list[BenchmarkSpec]:
    """Specs from a list of mappings / registry names (``paper``: the paper's six; ``testbed`` /
    ``synthetic``: a generated family's three held-out tiers); names must be unique."""
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)) or not entries:
        raise UserError(f"{where}: expected a non-empty list of benchmarks")
    aliases = {"paper": registry.ALIASES["paper"], **GENERATED_ALIASES}
    entries = [name for entry in entries for name in (aliases[entry] if _is_alias(entry, aliases) else (entry,))]
    specs = [spec_from_mapping(entry, f"{where}[{i}]") for i, entry in enumerate(entries)]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise UserError(f"{where}: benchmark name {spec.name!r} appears twice")
        seen.add(spec.name)
    return specs


def _is_alias(entry: Any, aliases: Mapping[str, Any]) -> bool:
    return isinstance(entry, str) and entry in aliases


def load_benchmark_config(
    source: str | os.PathLike[str] | Sequence[Any] | None,
) -> tuple[list[BenchmarkSpec], str | None]:
    """The benchmarks and the configured data folder (None when the config names none).

    Args:
        source: ``None`` (the registry), a YAML file (``{data_dir?, benchmarks: [...]}`` or a bare
            list), a comma-separated list of registry names (``"math500,gsm8k"``; ``"paper"`` is the
            paper's six) or generated tiers (``"testbed:hard"``; ``"testbed"`` is all three), a list of
            mappings / registry names, or an empty list (no benchmarks: only the held-out split of the
            training tiers is evaluated, which needs no files).

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
        names = [name.strip() for name in str(source).split(",")]
        named = all(is_generated(n) or n in GENERATED_ALIASES or n == "paper" or n in _BY_NAME for n in names)
        if path.suffix.lower() in (".yaml", ".yml") or (path.is_file() and not named):
            return _load_yaml(path)
        return parse_benchmark_list(
            [name.strip() for name in str(source).split(",") if name.strip()], "benchmarks"
        ), None
    return parse_benchmark_list(source, "benchmarks"), None


def _load_yaml(path: Path) -> tuple[list[BenchmarkSpec], str | None]:
    import yaml

    if not path.is_file():
        raise MissingFileError(f"benchmark config {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise UserError(f"{path}: invalid YAML ({error})") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    if isinstance(data, list):
        return parse_benchmark_list(data, f"{path}"), None
    if not isinstance(data, Mapping) or "benchmarks" not in data:
        raise UserError(f"{path}: expected a mapping with a 'benchmarks' list (and optionally 'data_dir')")
    unknown = sorted(set(data) - {"benchmarks", "data_dir"})
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: benchmarks, data_dir")
    data_dir = data.get("data_dir")
    if data_dir is not None and not isinstance(data_dir, str):
        raise UserError(f"{path}: 'data_dir' must be a path string or null")
    return parse_benchmark_list(data["benchmarks"], f"{path}: benchmarks"), data_dir


def resolve_data_dir(explicit: str | os.PathLike[str] | None, configured: str | None = None) -> Path | None:
    """The folder holding benchmark files: the explicit argument, else the config's ``data_dir``,
    else ``$LITE_PPO_EVAL_DIR``, else None (registered benchmarks then come from the package or the
    cache, custom ones from paths relative to the working directory)."""
    for value in (explicit, configured, os.environ.get(ENV_DATA_DIR)):
        if value:
            path = Path(os.path.expanduser(str(value)))
            if not path.is_dir():
                raise MissingFileError(f"benchmark data folder {str(path)!r} does not exist")
            return path
    return None


def apply_limit(specs: Sequence[BenchmarkSpec], limit: int | None) -> list[BenchmarkSpec]:
    """Cap every benchmark at ``limit`` problems (the smaller of it and a spec's own limit)."""
    if limit is None:
        return list(specs)
    if limit < 1:
        raise UserError(f"limit must be >= 1, got {limit}")
    return [replace(s, limit=limit if s.limit is None else min(s.limit, limit)) for s in specs]


def benchmark_paths(
    specs: Sequence[BenchmarkSpec], data_dir: str | os.PathLike[str] | None, fetch_missing: bool | None = None
) -> list[list[Path]]:
    """The file(s) of every benchmark; all missing registered sets are named in one error.

    ``fetch_missing``: fetch missing registered sets from the Hub now (default: only when no
    ``data_dir`` is given and no offline variable is set; see :func:`lite_ppo.data.registry.locate_many`).

    Raises:
        DatasetMissing: registered sets that are neither in ``data_dir``, shipped nor cached (and
            could not be fetched); the one-line message names them and ``lite-ppo data fetch ...``.
        FileNotFoundError: a custom benchmark's file does not exist.
    """
    named = [s.dataset for s in specs if s.dataset]
    located = registry.locate_many(named, data_dir, fetch_missing) if named else {}
    paths = []
    for spec in specs:
        if is_generated(spec.file):
            paths.append([])  # generated, not read from a file
            continue
        if spec.dataset:
            paths.append(located[spec.dataset])
            continue
        path = Path(os.path.expanduser(spec.file))
        if not path.is_absolute() and data_dir is not None:
            path = Path(data_dir) / path
        if not path.is_file():
            raise MissingFileError(
                f"benchmark {spec.name!r}: file {str(path)!r} does not exist (check data_dir / --data-dir)"
            )
        paths.append([path])
    return paths


def generated_problems(spec: BenchmarkSpec) -> list[Problem]:
    """The held-out split of a generated tier, as a training run with ``heldout_seed`` holds it out.

    A run holding out ``val_size`` problems holds out the first ``val_size`` of this list (the
    held-out stream is drawn in order), so ``limit`` = the run's ``val_size`` gives its exact split.
    """
    family, _, tier = spec.file.partition(":")
    size = GENERATED_SIZE if spec.limit is None else spec.limit
    seed = GENERATED_HELDOUT_SEED if spec.heldout_seed is None else spec.heldout_seed
    try:
        pool = SyntheticPool(spec.name, tier, seed=seed, val_size=size, family=family, heldout_seed=seed)
    except ValueError as error:
        raise UserError(f"benchmark {spec.name!r}: {error}") from None
    return pool.held_out


def _load(spec: BenchmarkSpec, paths: Sequence[Path]) -> list[Problem]:
    if is_generated(spec.file):
        return generated_problems(spec)
    problems = [problem for path in paths for problem in load_problems(path, tier=spec.name)]
    return problems[: spec.limit] if spec.limit is not None else problems


def load_benchmark(
    spec: BenchmarkSpec, data_dir: str | os.PathLike[str] | None, fetch_missing: bool | None = None
) -> list[Problem]:
    """The first ``spec.limit`` problems of the benchmark, tier set to the benchmark name.

    Raises:
        DatasetMissing / FileNotFoundError: see :func:`benchmark_paths`.
        DataFormatError: a malformed line or an empty file (``<file>:<line>: <what is wrong>``).
    """
    return _load(spec, benchmark_paths([spec], data_dir, fetch_missing)[0])


def load_benchmarks(
    specs: Sequence[BenchmarkSpec], data_dir: str | os.PathLike[str] | None, fetch_missing: bool | None = None
) -> list[tuple[BenchmarkSpec, list[Problem]]]:
    """Load every benchmark; every missing set is reported in one error before any file is read."""
    return [(spec, _load(spec, paths)) for spec, paths in zip(specs, benchmark_paths(specs, data_dir, fetch_missing))]
