"""Hugging Face Hub copies of the registered datasets, and their mapping to the project's schema.

A :class:`HubSource` names a public dataset on the Hub (repository, pinned revision, the configs /
splits that hold the rows) and a *mapping*: a function from one row in that dataset's own column
layout to one record of the project's schema (``id``, ``problem``, ``answer``, ``source`` and,
where the set has them, ``level`` / ``difficulty``), or ``None`` to skip the row. :func:`normalize`
runs a source through the ``datasets`` library and the mapping; :func:`normalized_bytes` writes the
records in one canonical JSONL form, whose SHA-256 the registry records per dataset.

This module only reads rows: the cache, locking and verification live in
:mod:`lite_ppo.data.registry`. ``datasets`` is imported only when a source is really loaded.

Example:
    >>> row = {"id": 60, "problem": "Find x.", "solution": "...", "answer": "025", "url": "u", "year": "2024"}
    >>> aime24_row(row, 0, HubPart())
    {'id': 'aime24-60', 'problem': 'Find x.', 'answer': '25', 'source': 'AIME2024'}
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lite_ppo.errors import UserError

# The schema's fields in the order every normalized record is written (checksums depend on it).
SCHEMA_FIELDS = ("id", "problem", "answer", "source", "level", "difficulty")

Row = Mapping[str, Any]


@dataclass(frozen=True)
class HubPart:
    """One ``datasets.load_dataset(repo, config, split=split)`` call of a source.

    Args:
        config: the dataset config (subset) name, or None for the default.
        split: the split holding the rows.
        label: passed to the mapping (e.g. ``"I"`` / ``"II"`` for the two AIME exams).
    """

    config: str | None = None
    split: str = "train"
    label: str = ""


@dataclass(frozen=True)
class HubSource:
    """A public Hub dataset and how its rows become schema records.

    Args:
        repo: the dataset id on the Hub (``"HuggingFaceH4/aime_2024"``).
        revision: the pinned commit (40 hex digits); ``None`` where no commit could be pinned
            (``main`` is used, and the row count / checksum check catches a changed copy).
        parts: the configs / splits read, in order.
        columns: the columns the mapping reads (checked before mapping, so a changed layout
            fails with the column names instead of a ``KeyError``).
        mapping: ``(row, index_in_part, part) -> record | None``.
        license: what the Hub dataset card states.
        keep_ids: a file under ``shipped/`` listing the ids to keep, in output order (for a set
            that is a filtered subset of the Hub dataset); None keeps every mapped row in order.
    """

    repo: str
    revision: str | None
    parts: tuple[HubPart, ...]
    columns: tuple[str, ...]
    mapping: Callable[[Row, int, HubPart], dict[str, Any] | None]
    license: str
    keep_ids: str | None = None

    @property
    def pinned(self) -> str:
        """``repo@revision`` (``repo@main (not pinned)`` without a revision)."""
        return f"{self.repo}@{self.revision}" if self.revision else f"{self.repo}@main (not pinned)"


# ------------------------------------------------------------------ normalization helpers
def schema_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The schema fields of a record, in :data:`SCHEMA_FIELDS` order (other fields dropped).

    Example:
        >>> schema_record({"answer": "2", "id": "a", "solution": "...", "problem": "1+1?", "source": "s"})
        {'id': 'a', 'problem': '1+1?', 'answer': '2', 'source': 's'}
    """
    return {name: record[name] for name in SCHEMA_FIELDS if name in record and record[name] is not None}


def normalized_bytes(records: Iterable[Mapping[str, Any]]) -> bytes:
    """The canonical JSONL bytes of records: schema fields in order, UTF-8, one record a line.

    Example:
        >>> normalized_bytes([{"id": "a", "problem": "½?", "answer": "1", "source": "s"}])
        b'{"id": "a", "problem": "\\xc2\\xbd?", "answer": "1", "source": "s"}\\n'
    """
    return "".join(json.dumps(schema_record(r), ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def integer_answer(value: Any) -> str:
    """An answer written as a plain integer where it is one (``"025"`` -> ``"25"``, ``27.0`` -> ``"27"``).

    Example:
        >>> integer_answer("025"), integer_answer(27.0), integer_answer("\\\\frac{1}{2}")
        ('25', '27', '\\\\frac{1}{2}')
    """
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    text = str(value).strip()
    return str(int(text)) if re.fullmatch(r"[+-]?\d+", text) else text


# ------------------------------------------------------------------ per-dataset mappings
def aime24_row(row: Row, index: int, part: HubPart) -> dict[str, Any]:
    """HuggingFaceH4/aime_2024: ``id`` (60..89), ``problem``, ``solution``, ``answer``, ``url``, ``year``."""
    return {
        "id": f"aime24-{int(row['id'])}",
        "problem": row["problem"],
        "answer": integer_answer(row["answer"]),
        "source": "AIME2024",
    }


def aime25_row(row: Row, index: int, part: HubPart) -> dict[str, Any]:
    """opencompass/AIME2025, configs ``AIME2025-I`` / ``AIME2025-II``: ``question``, ``answer``; the
    id is the exam and the 1-based position (``aime25-II-3``)."""
    return {
        "id": f"aime25-{part.label}-{index + 1}",
        "problem": row["question"],
        "answer": integer_answer(row["answer"]),
        "source": "AIME2025",
    }


def amc23_row(row: Row, index: int, part: HubPart) -> dict[str, Any] | None:
    """AI-MO/aimo-validation-amc (AMC 12 2022 and 2023): ``id``, ``problem``, ``answer`` (a float),
    ``url``; only the 2023 problems (the AoPS url names the year) are kept."""
    if "2023_AMC" not in str(row["url"]):
        return None
    return {
        "id": f"amc23-{int(row['id'])}",
        "problem": row["problem"],
        "answer": integer_answer(row["answer"]),
        "source": "AMC2023",
    }


def minerva_row(row: Row, index: int, part: HubPart) -> dict[str, Any]:
    """math-ai/minervamath (the 272 OCW problems of Minerva, in Qwen2.5-Math's order): ``question``,
    ``answer`` (the solution's last ``\\boxed{}``); a stray ``$ $`` inside an answer is removed."""
    return {
        "id": f"minerva-{index}",
        "problem": row["question"],
        "answer": str(row["answer"]).replace("$ $", ""),
        "source": "MinervaMath",
    }


def olympiadbench_row(row: Row, index: int, part: HubPart) -> dict[str, Any]:
    """Hothan/OlympiadBench ``OE_TO_maths_en_COMP``: ``id``, ``question``, ``final_answer`` (a list of
    ``$...$`` strings); the answer drops the ``$`` and joins several answers with ``", "``."""
    answers = [str(a).replace("$", "").strip() for a in row["final_answer"]]
    return {
        "id": f"olympiadbench-{int(row['id'])}",
        "problem": row["question"],
        "answer": ", ".join(answers),
        "source": "OlympiadBench/OE_TO_maths_en_COMP",
    }


def aime_1983_2023_row(row: Row, index: int, part: HubPart) -> dict[str, Any]:
    """di-zhang-fdu/AIME_1983_2024 (CSV): ``ID``, ``Year``, ``Problem Number``, ``Question``,
    ``Answer``, ``Part`` (``I``/``II``, empty before 2000). Ids read ``aime-<year>-<1|2>-<number>``;
    the reference file numbers problem 15 of 2023 as ``0`` and this mapping does the same."""
    year, number = int(row["Year"]), int(row["Problem Number"])
    exam = 2 if str(row.get("Part") or "").strip().upper() == "II" else 1
    if year == 2023 and number == 15:
        number = 0
    record = {"id": f"aime-{year}-{exam}-{number}", "problem": row["Question"], "answer": integer_answer(row["Answer"])}
    return {**record, "source": "AIME1983-2023", "level": 6, "difficulty": "hard"}


# ------------------------------------------------------------------ loading
Loader = Callable[[HubSource, HubPart], Iterable[Row]]


def check_reachable(timeout: float = 5.0) -> None:
    """Fail fast, in one line, when the Hub endpoint (``$HF_ENDPOINT``) cannot be reached: ``datasets``
    would otherwise retry for about half a minute before giving up."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(f"the Hugging Face Hub ({host}:{port}) is not reachable from here ({error})") from None


def load_part(source: HubSource, part: HubPart) -> Any:
    """``datasets.load_dataset`` of one part at the pinned revision (this is the network call)."""
    try:
        import datasets
    except ImportError as error:
        raise UserError(
            "fetching data from the Hugging Face Hub needs the `datasets` package: pip install datasets"
        ) from error
    check_reachable()
    return datasets.load_dataset(source.repo, part.config, split=part.split, revision=source.revision)


def normalize(source: HubSource, loader: Loader = load_part, shipped_dir: Path | None = None) -> list[dict[str, Any]]:
    """Load every part of ``source`` with ``loader`` and map its rows to schema records, in order.

    Args:
        source: the Hub dataset.
        loader: ``(source, part) -> rows``; the default downloads with ``datasets``. Tests pass a
            loader that reads a local file with ``datasets.load_dataset("json", data_files=...)``.
        shipped_dir: the folder holding ``source.keep_ids``.

    Raises:
        UserError: the loaded rows lack a column the mapping reads.
    """
    records: list[dict[str, Any]] = []
    for part in source.parts:
        rows = loader(source, part)
        names = getattr(rows, "column_names", None)
        where = f"{source.pinned}" + (f" config {part.config}" if part.config else "") + f" split {part.split}"
        if names is not None:
            missing = [c for c in source.columns if c not in names]
            if missing:
                raise UserError(
                    f"{where}: column(s) {', '.join(missing)} missing (it "
                    f"has {', '.join(names)}); the dataset's layout changed"
                )
        for index, row in enumerate(rows):
            record = source.mapping(row, index, part)
            if record is not None:
                records.append(schema_record(record))
    if source.keep_ids is not None:
        if shipped_dir is None:
            raise ValueError("normalize: keep_ids needs shipped_dir")
        order = (shipped_dir / source.keep_ids).read_text(encoding="utf-8").split()
        by_id = {record["id"]: record for record in records}
        records = [by_id[i] for i in order if i in by_id]
    return records
