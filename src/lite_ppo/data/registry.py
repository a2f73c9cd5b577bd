"""Named datasets: the evaluation benchmarks and the paper's training tiers, shipped or fetched.

Every name below can stand where a data file path is accepted: ``data.sources`` of the data
module (``{hard: "paper:hard"}``), ``Evaluation(benchmarks=...)`` and ``lite-ppo evaluate
--benchmarks`` (``math500,aime24`` or ``paper``, the paper's six benchmarks). Each entry records
where its rows come from, their license, the row count and the SHA-256 of the normalized file
(:func:`lite_ppo.data.hub.normalized_bytes`), so every copy can be checked.

Where a name's file is found, first match wins:

1. the data folder the user gives (``--data-dir``, ``data_dir:``, ``data.data_dir``): a file named
   like :attr:`Dataset.filename` (``aime24.jsonl`` or ``aime24.jsonl.gz``) in the schema, so offline
   clusters work with a copied folder;
2. the copy shipped inside the package (``lite_ppo/data/shipped/``) for sets whose license allows
   redistribution (MIT: MATH-500, GSM8K test, the MATH/GSM8K rows of the training tiers);
3. the user cache, ``$LITE_PPO_CACHE/data`` (``~/.cache/lite_ppo/data``), filled by
   ``lite-ppo data fetch NAME`` from the Hugging Face Hub;
4. a fetch on first use (not when a data folder is given, nor with ``HF_HUB_OFFLINE=1`` /
   ``HF_DATASETS_OFFLINE=1`` / ``LITE_PPO_DATA_OFFLINE=1``); where that is impossible a one-line
   :class:`DatasetMissing` names the set and the command that fetches it.

``paper:hard`` is MATH levels 4-5 (shipped, ``paper:hard-math``) plus AIME 1983-2023 (© MAA, not
shipped: ``paper:hard-aime``, fetched); it needs both parts. ``paper:hard-math`` alone works
offline.

The recorded checksums are those of the reference files (built from the pinned GitHub sources
named in ``origin``); a Hub copy whose text differs in any byte is refused by ``fetch`` (and can be
kept, marked unverified, with ``--no-verify``). Two Hub sources could not be pinned to a commit
(``aime24``, ``minerva_math``: ``main`` is read; the checksum still guards the content).

Example:
    >>> get("aime24").shipped, get("math500").shipped
    (False, True)
    >>> locate("math500")[0].name                          # the shipped copy
    'math500.jsonl.gz'
    >>> locate("aime24")                                   # doctest: +SKIP
    lite_ppo.data.registry.DatasetMissing: dataset 'aime24' is not available ... run `lite-ppo data fetch aime24` ...
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from lite_ppo.data import hub
from lite_ppo.data.hub import HubPart, HubSource
from lite_ppo.errors import UserError

__all__ = [
    "DATASETS",
    "PAPER_BENCHMARKS",
    "SHIPPED_DIR",
    "Dataset",
    "DatasetMissing",
    "data_cache_dir",
    "expand_names",
    "fetch",
    "get",
    "is_dataset_name",
    "locate",
    "locate_many",
    "status",
]

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
OFFLINE_VARIABLES = ("LITE_PPO_DATA_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")

_MAA = "problems © Mathematical Association of America; no data license given by the source (not redistributed)"


@dataclass(frozen=True)
class Dataset:
    """One registered dataset.

    Args:
        name: the name used in configs (``"aime24"``, ``"paper:hard"``).
        role: ``"eval"`` (a benchmark) or ``"train"`` (a training tier).
        title: display name (benchmark tables).
        filename: the file's name in a data folder (``aime24.jsonl``; the names of the reference
            folders ``eval/`` and ``train/``, so such a folder works as ``--data-dir`` unchanged).
        rows: the row count of the normalized file.
        sha256: SHA-256 of the normalized file (:func:`lite_ppo.data.hub.normalized_bytes`).
        origin: where the reference rows come from (repository @ commit : path).
        license: the license of the rows, as found.
        shipped: the file ships in the package as ``shipped/<cache_name>.jsonl.gz``.
        hub: the Hub dataset it is fetched from (sets that are not shipped).
        parts: for a composite set, the names whose rows, in order, make it.
        in_average: a benchmark that counts in the paper's average.
    """

    name: str
    role: str
    title: str
    filename: str
    rows: int
    sha256: str
    origin: str
    license: str
    shipped: bool = False
    hub: HubSource | None = None
    parts: tuple[str, ...] = ()
    in_average: bool = True

    @property
    def cache_name(self) -> str:
        """The file stem used in the cache and in ``shipped/`` (``paper:hard-aime`` -> ``paper_hard-aime``)."""
        return self.name.replace(":", "_")

    @property
    def shipped_path(self) -> Path:
        return SHIPPED_DIR / f"{self.cache_name}.jsonl.gz"

    @property
    def where_from(self) -> str:
        """One line: shipped, fetched from ``repo@revision``, or made of parts."""
        if self.parts:
            return " + ".join(self.parts)
        if self.shipped:
            return "shipped in the package"
        return f"hf://{self.hub.pinned}" if self.hub else "-"


_SIMPLERL = "hkust-nlp/simpleRL-reason @ cf1c7858bfc145a27aa733e75d930d34f0d318a6 : examples/simplelr_math_eval/data"
_GSM8K = "openai/grade-school-math @ 3101c7d5072418e28b9008a6636bde82a006892c : grade_school_math/data"
_MATH_TRAIN = (
    "MATH train (Hendrycks et al.) from aiwaves-cn/agents @ e8c4e3c2d19739d3dff59e577d1c97090cc15f59 : "
    "src/agents/datasets/data/math/train"
)

_ENTRIES = (
    Dataset(
        "math500",
        "eval",
        "MATH-500",
        "math500.jsonl",
        500,
        "ec450f906b22bed9818b5956986b157aaac8276ba8c7378c7b6dc74af62599a7",
        f"{_SIMPLERL}/math500/test.jsonl (the PRM800K 500-problem split of the MATH test set)",
        "MIT (MATH © 2021 Dan Hendrycks; PRM800K split © OpenAI, MIT)",
        shipped=True,
    ),
    Dataset(
        "aime24",
        "eval",
        "AIME24",
        "aime24.jsonl",
        30,
        "3619f4b48fa80bf77c254a1d05b559b4d53936b4fa5ef845e2fb0b34e7dbf76c",
        f"{_SIMPLERL}/aime24/test.jsonl (= QwenLM/Qwen2.5-Math evaluation/data/aime24)",
        _MAA,
        hub=HubSource(
            "HuggingFaceH4/aime_2024",
            None,
            (HubPart(split="train"),),
            ("id", "problem", "answer"),
            hub.aime24_row,
            license="no license on the card",
        ),
    ),
    Dataset(
        "aime25",
        "eval",
        "AIME25",
        "aime25.jsonl",
        30,
        "0b2cb69ac3cbeb6a2dd55d964535ac3df269cb5cff7e6ef50beaa7cc630a108d",
        "inclusionAI/AReaL @ 1b0306631b01becc329af59df560efb754be34af "
        ": evaluation/data/aime25/test.jsonl (escape defects repaired)",
        _MAA,
        hub=HubSource(
            "opencompass/AIME2025",
            "a6ad95f611d72cf628a80b58bd0432ef6638f958",
            (HubPart("AIME2025-I", "test", "I"), HubPart("AIME2025-II", "test", "II")),
            ("question", "answer"),
            hub.aime25_row,
            license="as on the card (MathArena's copy of these problems is CC BY-NC-SA 4.0)",
        ),
    ),
    Dataset(
        "amc23",
        "eval",
        "AMC23",
        "amc23.jsonl",
        40,
        "6ab0821048abda39343445450bdfadeb7182c8035ade5c44e795ddd5b361d241",
        f"{_SIMPLERL}/amc23/test.jsonl (= Qwen2.5-Math evaluation/data/amc23)",
        _MAA,
        hub=HubSource(
            "AI-MO/aimo-validation-amc",
            "3439067ac9825a505319caa5ca4a8895942d8770",
            (HubPart(split="train"),),
            ("id", "problem", "answer", "url"),
            hub.amc23_row,
            license="apache-2.0 on the card (the problems are © MAA)",
        ),
    ),
    Dataset(
        "minerva_math",
        "eval",
        "MinervaMath",
        "minerva_math.jsonl",
        272,
        "49a1a91a9e05080e7ae0185a5aee63f8b9451f90e32adf3f92d10fc3346fbcc1",
        f"{_SIMPLERL}/minerva_math/test.jsonl (Minerva's OCWCourses set)",
        "MIT OpenCourseWare material (normally CC BY-NC-SA); no license given by the source (not redistributed)",
        hub=HubSource(
            "math-ai/minervamath",
            None,
            (HubPart(split="test"),),
            ("question", "answer"),
            hub.minerva_row,
            license="no license on the card",
        ),
    ),
    Dataset(
        "olympiadbench",
        "eval",
        "OlympiadBench",
        "olympiadbench.jsonl",
        675,
        "93069fd6bf69cf40ed582675c8939d58812058b57780a4ee6b741e7312f63637",
        f"{_SIMPLERL}/olympiadbench/test.jsonl (OE_TO_maths_en_COMP)",
        "OpenBMB/OlympiadBench states no license (the Hub card says apache-2.0); not redistributed",
        hub=HubSource(
            "Hothan/OlympiadBench",
            "3b426ee1d587c71b495146dde9f3e995ee7ac59f",
            (HubPart("OE_TO_maths_en_COMP", "train"),),
            ("id", "question", "final_answer"),
            hub.olympiadbench_row,
            license="apache-2.0 on the card",
        ),
    ),
    Dataset(
        "gsm8k",
        "eval",
        "GSM8K",
        "gsm8k_test.jsonl",
        1319,
        "fcba35d97e072161cbe1c78db98b4d7a0cecb0c067c38b7ccada9d80b9d0c79d",
        f"{_GSM8K}/test.jsonl",
        "MIT (© 2021 OpenAI)",
        shipped=True,
        in_average=False,
    ),
    Dataset(
        "paper:easy",
        "train",
        "easy",
        "easy.jsonl",
        8032,
        "d65f77e13fb27216e2881641dced3365358b00529e3cb8af37330081ee534d91",
        f"GSM8K train 7,473 ({_GSM8K}/train.jsonl) + MATH train level "
        f"1: 559 ({_MATH_TRAIN}); de-duplicated and decontaminated",
        "MIT (GSM8K © 2021 OpenAI; MATH © 2021 Dan Hendrycks)",
        shipped=True,
    ),
    Dataset(
        "paper:medium",
        "train",
        "medium",
        "medium.jsonl",
        2935,
        "3a33e697ccc630ae08119eec2f9d4e2f79a2ad6fc7c17a7c66a6c3548c021302",
        f"MATH train levels 2-3: 1,344 + 1,591 ({_MATH_TRAIN}); de-duplicated and decontaminated",
        "MIT (MATH © 2021 Dan Hendrycks)",
        shipped=True,
    ),
    Dataset(
        "paper:hard-math",
        "train",
        "hard (MATH part)",
        "hard-math.jsonl",
        3980,
        "b724fbf1a9b19f3b4bfa245e330df55d1bb59321526b15a62685f7af5d83d8b9",
        f"MATH train levels 4-5: 1,687 + 2,293 ({_MATH_TRAIN}); de-duplicated and decontaminated",
        "MIT (MATH © 2021 Dan Hendrycks)",
        shipped=True,
    ),
    Dataset(
        "paper:hard-aime",
        "train",
        "hard (AIME part)",
        "hard-aime.jsonl",
        550,
        "11f3bdac77952b9950ae4eaffdc3ad1bdb84bdfc78e50e0d00cce360d1eeff6d",
        "AIME 1983-2023 from agentica-project/deepscaler @ 95ef74ffee001cce89463f2d61dfdce1d03576c1 : "
        "deepscaler/data/train/aime.json, "
        "minus copies of MATH problems and of evaluation problems (the kept ids: shipped/paper_hard_aime.ids)",
        _MAA,
        hub=HubSource(
            "di-zhang-fdu/AIME_1983_2024",
            "53ed0870b96dfe2117d5eb58c261a8812606a45a",
            (HubPart(split="train"),),
            ("Year", "Problem Number", "Question", "Answer", "Part"),
            hub.aime_1983_2023_row,
            license="mit on the card (the problems are © MAA)",
            keep_ids="paper_hard_aime.ids",
        ),
    ),
    Dataset(
        "paper:hard",
        "train",
        "hard",
        "hard.jsonl",
        4530,
        "eae430ed9df9c11dd16c55e553048885200fc8fddc132367c94ae725ce74ff90",
        "MATH train levels 4-5 (paper:hard-math) + AIME 1983-2023 (paper:hard-aime)",
        "MIT (MATH part, shipped) + © MAA (AIME part, fetched)",
        parts=("paper:hard-math", "paper:hard-aime"),
    ),
)

DATASETS: dict[str, Dataset] = {entry.name: entry for entry in _ENTRIES}
# The paper's six benchmarks: their unweighted mean is the paper's "average".
PAPER_BENCHMARKS: tuple[str, ...] = ("math500", "aime24", "aime25", "amc23", "minerva_math", "olympiadbench")
ALIASES: dict[str, tuple[str, ...]] = {
    "paper": PAPER_BENCHMARKS,
    "eval": tuple(e.name for e in _ENTRIES if e.role == "eval"),
    "train": ("paper:easy", "paper:medium", "paper:hard"),
    "all": tuple(DATASETS),
}


class DatasetMissing(UserError):
    """Registered sets that are not available here; the message names them and the fetch command."""

    def __init__(
        self, names: Sequence[str], data_dir: str | os.PathLike[str] | None = None, reason: str | None = None
    ) -> None:
        self.names = list(names)
        files = ", ".join(DATASETS[n].filename for n in self.names)
        sets = ", ".join(repr(n) for n in self.names)
        where = f"not in the data folder {str(data_dir)!r}, " if data_dir is not None else ""
        because = f" ({reason})" if reason else ""
        plural = "s" if len(self.names) > 1 else ""
        super().__init__(
            f"dataset{plural} {sets} not available here{because}: {where}not shipped with lite-ppo "
            f"(its license does not allow it) and not in the cache {data_cache_dir()}; run `lite-ppo "
            f"data fetch {' '.join(self.names)}` where the Hugging Face Hub is reachable, or "
            f"give a data folder holding {files} in the project's schema (--data-dir, data_dir)"
        )

    def __reduce__(self):  # pickled across processes (spawned ranks) as the plain one-line UserError
        return (UserError, (str(self),))


def data_cache_dir() -> Path:
    """``$LITE_PPO_CACHE/data`` (``~/.cache/lite_ppo/data`` by default): where fetched sets live.

    Example:
        >>> data_cache_dir().name
        'data'
    """
    root = os.environ.get("LITE_PPO_CACHE") or os.path.join("~", ".cache", "lite_ppo")
    return Path(root).expanduser() / "data"


def get(name: str) -> Dataset:
    """The registry entry of ``name``; an unknown name fails with the list of known ones."""
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)} (aliases: {', '.join(ALIASES)})")
    return DATASETS[name]


def is_dataset_name(spec: object) -> bool:
    """Whether a source / benchmark string is a registry name (``paper:...`` always counts, so a
    misspelt tier fails with the list of names instead of "no such file")."""
    return isinstance(spec, str) and (spec in DATASETS or spec.startswith("paper:"))


def expand_names(names: Iterable[str]) -> list[str]:
    """Names with the aliases (``paper``, ``eval``, ``train``, ``all``) expanded, duplicates dropped.

    Example:
        >>> expand_names(["paper", "gsm8k", "math500"])
        ['math500', 'aime24', 'aime25', 'amc23', 'minerva_math', 'olympiadbench', 'gsm8k']
    """
    out: list[str] = []
    for name in names:
        for expanded in ALIASES.get(name, (name,)):
            get(expanded)
            if expanded not in out:
                out.append(expanded)
    return out


def cache_path(entry: Dataset) -> Path:
    return data_cache_dir() / f"{entry.cache_name}.jsonl"


def _in_folder(entry: Dataset, data_dir: str | os.PathLike[str] | None) -> Path | None:
    if data_dir is None:
        return None
    folder = Path(os.path.expanduser(str(data_dir)))
    return next((p for p in (folder / entry.filename, folder / f"{entry.filename}.gz") if p.is_file()), None)


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() not in ("", "0", "false", "no") for v in OFFLINE_VARIABLES)


def _find(entry: Dataset, data_dir: str | os.PathLike[str] | None) -> list[Path] | None:
    """The file(s) of a set without fetching; None when some part is missing."""
    found = _in_folder(entry, data_dir)
    if found is not None:
        return [found]
    if entry.parts:
        paths = [_find(get(part), data_dir) for part in entry.parts]
        return None if any(p is None for p in paths) else [p for part in paths for p in part]
    if entry.shipped:
        return [entry.shipped_path]
    cached = cache_path(entry)
    return [cached] if cached.is_file() else None


def _missing_leaves(entry: Dataset, data_dir: str | os.PathLike[str] | None) -> list[str]:
    """The fetchable sets (composites resolved to their parts) that ``_find`` lacks."""
    if _find(entry, data_dir) is not None:
        return []
    if entry.parts:
        return [leaf for part in entry.parts for leaf in _missing_leaves(get(part), data_dir)]
    return [entry.name]


_fetch_failure: str | None = None  # why the last fetch on first use failed (not retried in this process)


def locate_many(
    names: Sequence[str], data_dir: str | os.PathLike[str] | None = None, fetch_missing: bool | None = None
) -> dict[str, list[Path]]:
    """The file(s) of every name (several for a composite), fetching missing sets on first use.

    Args:
        names: registry names (no aliases).
        data_dir: a folder of files in the schema, named like :attr:`Dataset.filename`; it wins
            over the shipped and cached copies.
        fetch_missing: fetch what is missing from the Hub now; default: only when no data folder
            is given and no offline variable (``HF_HUB_OFFLINE`` ...) is set.

    Raises:
        DatasetMissing: one line naming every set still missing and the command that fetches it.
    """
    entries = [get(name) for name in names]
    if fetch_missing is None:
        fetch_missing = data_dir is None and not _offline()
    global _fetch_failure
    missing = list(dict.fromkeys(leaf for entry in entries for leaf in _missing_leaves(entry, data_dir)))
    reason = _fetch_failure if missing and fetch_missing else None
    if missing and fetch_missing and _fetch_failure is None:
        for name in missing:
            print(
                f"lite-ppo: dataset {name!r} is not in the cache; fetching it from hf://{get(name).hub.pinned} "
                f"(`lite-ppo data fetch {name}` does this ahead of time)",
                file=sys.stderr,
                flush=True,
            )
            try:
                fetch(name)
            except Exception as error:  # no network, no `datasets`, a changed Hub copy: say why, once
                reason = (
                    f"fetching {name!r} failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
                )
                # One failed attempt per process: later look-ups (other sets, other ranks' calls) do not retry.
                _fetch_failure = reason
                break
        missing = list(dict.fromkeys(leaf for entry in entries for leaf in _missing_leaves(entry, data_dir)))
    if missing:
        raise DatasetMissing(missing, data_dir, reason)
    return {entry.name: _find(entry, data_dir) for entry in entries}


def locate(name: str, data_dir: str | os.PathLike[str] | None = None, fetch_missing: bool | None = None) -> list[Path]:
    """The file(s) holding ``name``'s rows (see :func:`locate_many`)."""
    return locate_many([name], data_dir, fetch_missing)[name]


def status(name: str, data_dir: str | os.PathLike[str] | None = None) -> str:
    """``data-dir``, ``shipped``, ``cached``, ``cached (unverified)``, ``missing`` or, for a
    composite, its parts' states (``shipped + missing``)."""
    entry = get(name)
    if _in_folder(entry, data_dir) is not None:
        return "data-dir"
    if entry.parts:
        return " + ".join(status(part, data_dir) for part in entry.parts)
    if entry.shipped:
        return "shipped"
    path = cache_path(entry)
    if not path.is_file():
        return "missing"
    try:
        verified = json.loads(path.with_suffix(".json").read_text())["verified"]
    except (OSError, ValueError, KeyError, TypeError):
        verified = False
    return "cached" if verified else "cached (unverified)"


def fetch(name: str, force: bool = False, verify: bool = True, loader: hub.Loader | None = None) -> list[Path]:
    """Download a set from the Hub, normalize it, check rows and checksum, cache it; returns its file(s).

    Shipped sets need nothing (their packaged file is returned). A composite fetches its parts.
    The cache file is written under a lock into a temporary file that is renamed when complete,
    so concurrent fetches (several ranks) and interrupted ones never leave a partial file.

    Args:
        name: a registry name.
        force: fetch again even when cached.
        verify: refuse a copy whose row count or SHA-256 differs from the recorded one. With
            ``False`` a differing copy is cached and listed as ``cached (unverified)``.
        loader: rows per Hub part (tests pass a local-file loader); default: ``datasets``.

    Raises:
        UserError: the Hub copy differs from the recorded one (rows or checksum), or its layout changed.
    """
    entry = get(name)
    if entry.parts:
        return [path for part in entry.parts for path in fetch(part, force, verify, loader)]
    if entry.shipped:
        return [entry.shipped_path]
    if entry.hub is None:  # pragma: no cover - every entry is shipped, composite or on the Hub
        raise UserError(f"dataset {name!r} has no Hub source")
    final = cache_path(entry)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{entry.cache_name}.lock")):
        if final.is_file() and not force:
            return [final]
        records = hub.normalize(entry.hub, loader or hub.load_part, SHIPPED_DIR)
        data = hub.normalized_bytes(records)
        digest = hashlib.sha256(data).hexdigest()
        problems = []
        if len(records) != entry.rows:
            problems.append(f"{len(records)} rows, expected {entry.rows}")
        if digest != entry.sha256:
            problems.append(f"sha256 {digest[:12]}..., expected {entry.sha256[:12]}...")
        if problems and verify:
            raise UserError(
                f"dataset {name!r} from hf://{entry.hub.pinned} differs from the recorded one ({'; '.join(problems)}); "
                f"nothing was cached (`lite-ppo data fetch {name} --no-verify` caches it anyway, listed as unverified)"
            )
        # The record first: a crash between the two leaves no data file (status stays "missing").
        meta = {
            "name": name,
            "hub": entry.hub.repo,
            "revision": entry.hub.revision,
            "rows": len(records),
            "sha256": digest,
            "verified": not problems,
        }
        _atomic_write(final.with_suffix(".json"), json.dumps(meta, indent=1).encode())
        _atomic_write(final, data)
    return [final]


def _atomic_write(path: Path, data: bytes) -> None:
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
