"""The dataset registry: shipped files, Hub normalization (through `datasets`, on local files), name
resolution in data.sources / Evaluation / evaluate, the cache, `lite-ppo data`, and data-file errors.

No test reaches the Hugging Face Hub: every Hub dataset is replaced by a local file written in that
dataset's own column layout from the reference rows of ../shared/data, and read with the real
``datasets.load_dataset("json" | "parquet" | "csv", data_files=...)`` code path.
"""

from __future__ import annotations

import csv
import fnmatch
import gzip
import hashlib
import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib

from helpers.paths import REPO
from lite_ppo.cli.commands import main as cli
from lite_ppo.data import DataFormatError, MathDataModule, load_jsonl_problems, load_problems, registry
from lite_ppo.data.hub import HubPart, HubSource, normalized_bytes, schema_record
from lite_ppo.errors import UserError
from lite_ppo.evaluation import load_benchmark_config, load_benchmarks

HUB_SETS = [name for name, entry in registry.DATASETS.items() if entry.hub is not None]
SHIPPED = [name for name, entry in registry.DATASETS.items() if entry.shipped]
# Reference files in ../shared/data: (file, first row, end row) per registered set.
REFERENCE = {
    "math500": ("eval/math500.jsonl", 0, None),
    "aime24": ("eval/aime24.jsonl", 0, None),
    "aime25": ("eval/aime25.jsonl", 0, None),
    "amc23": ("eval/amc23.jsonl", 0, None),
    "minerva_math": ("eval/minerva_math.jsonl", 0, None),
    "olympiadbench": ("eval/olympiadbench.jsonl", 0, None),
    "gsm8k": ("eval/gsm8k_test.jsonl", 0, None),
    "paper:easy": ("train/easy.jsonl", 0, None),
    "paper:medium": ("train/medium.jsonl", 0, None),
    "paper:hard-math": ("train/hard.jsonl", 0, 3980),
    "paper:hard-aime": ("train/hard.jsonl", 3980, None),
    "paper:hard": ("train/hard.jsonl", 0, None),
}


@pytest.fixture(autouse=True)
def _offline_cache(tmp_path, monkeypatch):
    """A fresh, empty data cache per test, and no fetch on first use unless a test allows it."""
    monkeypatch.setenv("LITE_PPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LITE_PPO_DATA_OFFLINE", "1")
    monkeypatch.delenv("LITE_PPO_EVAL_DIR", raising=False)


def reference_rows(shared: Path, name: str) -> list[dict]:
    file, start, end = REFERENCE[name]
    return [json.loads(line) for line in jsonl_lines((shared / file).read_bytes())[start:end]]


def jsonl_lines(data: bytes) -> list[str]:
    # Split on "\n" only: str.splitlines also splits on U+2028, U+0085, ... that JSON strings may hold raw.
    return data.decode("utf-8").rstrip("\n").split("\n")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------ Hub layouts from reference rows
def hub_layout(name: str, rows: list[dict], folder: Path) -> dict[str, tuple[str, Path]]:
    """Write ``rows`` (reference records) in the Hub dataset's own columns: part label -> (builder, file).

    Each layout also carries what the mapping must undo: zero-padded AIME answers, AMC's float
    answers and the 2022 problems that the 2023 set drops, OlympiadBench's ``$``-wrapped answer
    lists, the AIME CSV's exam/number columns, extra rows and a shuffled order for the id filter.
    """
    if name == "aime24":
        # HuggingFaceH4/aime_2024: id (int), problem, solution, answer (zero-padded like "025"), url, year.
        hub_rows = [
            {
                "id": int(r["id"].split("-")[1]),
                "problem": r["problem"],
                "solution": r["solution"],
                "answer": f"{int(r['answer']):03d}",
                "url": r["url"],
                "year": "2024",
            }
            for r in rows
        ]
        return {"": ("json", write_jsonl(folder / "aime24.jsonl", hub_rows))}
    if name == "aime25":
        # opencompass/AIME2025: two configs (exam I and II), columns question, answer.
        parts = {}
        for exam in ("I", "II"):
            exam_rows = [
                {"question": r["problem"], "answer": r["answer"]} for r in rows if r["id"].split("-")[1] == exam
            ]
            parts[exam] = ("json", write_jsonl(folder / f"aime2025-{exam}.jsonl", exam_rows))
        return parts
    if name == "amc23":
        # AI-MO/aimo-validation-amc: id, problem, answer (float), url; AMC 2022 problems are mixed in.
        hub_rows = [
            {"id": int(r["id"].split("-")[1]), "problem": r["problem"], "answer": float(r["answer"]), "url": r["url"]}
            for r in rows
        ]
        for k in (3, 20):
            hub_rows.insert(
                k,
                {
                    "id": 900 + k,
                    "problem": "A 2022 problem.",
                    "answer": 5.0,
                    "url": "https://artofproblemsolving.com/wiki/index.php/2022_AMC_12A_Problems/Problem_3",
                },
            )
        return {"": ("json", write_jsonl(folder / "amc.jsonl", hub_rows))}
    if name == "minerva_math":
        # math-ai/minervamath: question, answer, in the set's order.
        return {
            "": (
                "json",
                write_jsonl(
                    folder / "minerva.jsonl", [{"question": r["problem"], "answer": r["answer"]} for r in rows]
                ),
            )
        }
    if name == "olympiadbench":
        # Hothan/OlympiadBench (Parquet): final_answer is a list of $-wrapped answers, several when is_multiple_answer.
        from datasets import Dataset

        hub_rows = []
        for r in rows:
            answers = r["answer"].split(", ") if r["is_multiple_answer"] else [r["answer"]]
            hub_rows.append(
                {
                    "id": int(r["id"].split("-")[1]),
                    "question": r["problem"],
                    "solution": [r["solution"]],
                    "final_answer": [f"${a}$" for a in answers],
                    "context": None,
                    "modality": "Text-only",
                    "difficulty": "Competition",
                    "is_multiple_answer": r["is_multiple_answer"],
                    "unit": r.get("unit"),
                    "answer_type": r["answer_type"],
                    "error": None,
                    "question_type": "Open-ended",
                    "subfield": r["subject"],
                    "subject": "Math",
                    "language": "English",
                }
            )
        path = folder / "OE_TO_maths_en_COMP.parquet"
        Dataset.from_list(hub_rows).to_parquet(str(path))
        return {"": ("parquet", path)}
    if name == "paper:hard-aime":
        # di-zhang-fdu/AIME_1983_2024 (CSV): ID, Year, Problem Number, Question, Answer, Part (empty before 2000);
        # it also holds the problems the reference dropped (copies of MATH / evaluation problems) and 2024.
        hub_rows = []
        for r in rows:
            _, year, exam, number = r["id"].split("-")
            number = 15 if number == "0" else int(number)  # the reference numbers 2023's problem 15 as 0
            part = "" if int(year) < 2000 else ("I" if exam == "1" else "II")
            hub_rows.append(
                {
                    "ID": f"{year}-{part or 'I'}-{number}",
                    "Year": int(year),
                    "Problem Number": number,
                    "Question": r["problem"],
                    "Answer": r["answer"],
                    "Part": part,
                }
            )
        hub_rows += [
            {
                "ID": "2024-I-1",
                "Year": 2024,
                "Problem Number": 1,
                "Question": "A 2024 problem.",
                "Answer": "204",
                "Part": "I",
            },
            {
                "ID": "1983-2",
                "Year": 1983,
                "Problem Number": 2,
                "Question": "A dropped problem.",
                "Answer": "15",
                "Part": "",
            },
        ]
        random.Random(0).shuffle(hub_rows)  # the output order comes from the shipped id list
        path = folder / "AIME_Dataset_1983_2024.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(hub_rows[0]))
            writer.writeheader()
            writer.writerows(hub_rows)
        return {"": ("csv", path)}
    raise AssertionError(f"no Hub layout for {name}")


def local_loader(files: dict[str, tuple[str, Path]]):
    """A ``hub.normalize`` loader that reads the local files with the real ``datasets`` builders."""
    import datasets

    def load(source: HubSource, part: HubPart):
        builder, path = files[part.label]
        return datasets.load_dataset(builder, data_files=str(path), split="train")

    return load


@pytest.mark.parametrize("name", HUB_SETS)
def test_hub_normalization_reproduces_the_reference_rows(name, shared_data, tmp_path):
    """Every Hub dataset: its own column layout -> `datasets` -> mapping -> the reference rows, exactly,
    and the fetch path (verify, lock, atomic write) caches them with the recorded checksum."""
    rows = reference_rows(shared_data, name)
    files = hub_layout(name, rows, tmp_path)
    entry = registry.get(name)
    (path,) = registry.fetch(name, loader=local_loader(files))  # verify=True: rows and sha256 must match
    assert path.parent == registry.data_cache_dir() and path.is_file()
    cached = [json.loads(line) for line in jsonl_lines(path.read_bytes())]
    assert cached == [schema_record(r) for r in rows]  # every schema field of every reference row
    assert len(cached) == entry.rows and hashlib.sha256(path.read_bytes()).hexdigest() == entry.sha256
    assert registry.status(name) == "cached"
    assert registry.locate(name) == [path]


def test_fetch_refuses_a_copy_that_differs_and_caches_nothing(shared_data, tmp_path):
    rows = reference_rows(shared_data, "aime24")
    rows[3] = {**rows[3], "answer": "999"}  # the Hub copy changed one answer
    files = hub_layout("aime24", rows, tmp_path)
    with pytest.raises(
        UserError, match=r"'aime24' from hf://HuggingFaceH4/aime_2024.*differs from the recorded one \(sha256"
    ):
        registry.fetch("aime24", loader=local_loader(files))
    assert registry.status("aime24") == "missing"
    registry.fetch("aime24", loader=local_loader(files), verify=False)  # --no-verify keeps it, marked
    assert registry.status("aime24") == "cached (unverified)"


def test_a_changed_hub_layout_names_the_missing_columns(tmp_path):
    import datasets

    path = write_jsonl(tmp_path / "x.jsonl", [{"Problem": "p", "answer": "1", "id": 60}])
    loader = lambda source, part: datasets.load_dataset("json", data_files=str(path), split="train")  # noqa: E731
    with pytest.raises(
        UserError,
        match=r"HuggingFaceH4/aime_2024@main \(not pinned\) split train: column\(s\) problem missing \(it has",
    ):
        registry.fetch("aime24", loader=loader)


# ------------------------------------------------------------------ shipped files
def _shipped_bytes(name: str) -> bytes:
    return gzip.decompress(registry.get(name).shipped_path.read_bytes())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_file_matches_its_record(name):
    data = _shipped_bytes(name)
    entry = registry.get(name)
    assert hashlib.sha256(data).hexdigest() == entry.sha256
    records = [json.loads(line) for line in jsonl_lines(data)]
    assert len(records) == entry.rows
    assert normalized_bytes(records) == data  # the canonical form the checksum is defined on
    problems = load_problems(entry.shipped_path)  # the loader reads .jsonl.gz and validates every row
    assert [p.id for p in problems] == [r["id"] for r in records]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_file_equals_the_reference_rows(name, shared_data):
    assert _shipped_bytes(name) == normalized_bytes(reference_rows(shared_data, name))


def test_composite_and_id_list_agree_with_the_records(shared_data):
    hard = registry.get("paper:hard")
    parts = [registry.get(p) for p in hard.parts]
    assert sum(p.rows for p in parts) == hard.rows
    assert hashlib.sha256(normalized_bytes(reference_rows(shared_data, "paper:hard"))).hexdigest() == hard.sha256
    ids = (registry.SHIPPED_DIR / "paper_hard_aime.ids").read_text().split()
    assert ids == [r["id"] for r in reference_rows(shared_data, "paper:hard-aime")]
    assert len(ids) == registry.get("paper:hard-aime").rows


def test_every_shipped_file_is_package_data():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lite_ppo.data"]
    for path in registry.SHIPPED_DIR.iterdir():
        assert any(fnmatch.fnmatch(f"shipped/{path.name}", g) for g in globs), path.name
    assert (registry.SHIPPED_DIR / "README.md").is_file()


SAMPLED_EVERY = 4


def _self_check_file(name: str, sampled: bool) -> list[tuple[str, str, str]]:
    """math-verify's self-check of one shipped file: each row's answer verifies against itself boxed.
    ``sampled``: every 4th row only; otherwise every other row (the two together cover the file)."""
    from math_verify import parse, verify

    failures = []
    for i, line in enumerate(jsonl_lines(_shipped_bytes(name))):
        if (i % SAMPLED_EVERY == 0) != sampled:
            continue
        record = json.loads(line)
        answer = record["answer"]
        if not verify(parse("$" + answer + "$"), parse("\\boxed{" + answer + "}")):
            failures.append((name, record["id"], answer))
    return failures


def test_shipped_answers_verify_against_themselves_sampled():
    """math-verify's self-check on every 4th row of every shipped file; the slow test below checks the rest."""
    assert [f for name in SHIPPED for f in _self_check_file(name, sampled=True)] == []


@pytest.mark.extended
@pytest.mark.slow
def test_shipped_answers_verify_against_themselves_all_rows():
    """The rows the sampled test leaves out, in 2 worker processes (one file per task): with it,
    every row of every shipped file is checked."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        results = pool.map(_self_check_file, SHIPPED, [False] * len(SHIPPED))
        assert [f for failures in results for f in failures] == []


# ------------------------------------------------------------------ resolution: data.sources, Evaluation, evaluate
def test_names_resolve_in_data_sources():
    dm = MathDataModule(
        sources={"easy": "paper:easy", "hard": "paper:hard-math"},
        weights={"easy": 1, "hard": 1},
        prompts_per_step=64,
        val_size=4,
    )
    dm.setup()
    easy_ids = {json.loads(line)["id"] for line in jsonl_lines(_shipped_bytes("paper:easy"))}
    hard_ids = {json.loads(line)["id"] for line in jsonl_lines(_shipped_bytes("paper:hard-math"))}
    batch = dm.global_batch(0)
    assert {p.tier for p in batch} == {"easy", "hard"}
    assert all(p.id in (easy_ids if p.tier == "easy" else hard_ids) for p in batch)
    assert len(dm.held_out()) == 8


def test_composite_needs_its_fetched_part_and_says_how_to_get_it():
    with pytest.raises(UserError) as info:
        MathDataModule(sources={"hard": "paper:hard"}, weights={"hard": 1}).setup()
    message = str(info.value)
    assert "'paper:hard-aime'" in message and "`lite-ppo data fetch paper:hard-aime`" in message and "\n" not in message
    with pytest.raises(UserError, match="unknown dataset 'paper:hardest'; known: .*paper:hard"):
        MathDataModule(sources={"hard": "paper:hardest"}, weights={"hard": 1}).setup()


def _fake_rows(prefix: str, n: int, tier: str | None = None) -> list[dict]:
    extra = {"difficulty": tier} if tier else {}
    return [
        {"id": f"{prefix}-{i}", "problem": f"{prefix} problem {i}?", "answer": str(i), "source": prefix, **extra}
        for i in range(n)
    ]


def test_data_dir_wins_over_cache_and_shipped_copies(tmp_path):
    cache = registry.data_cache_dir()
    cache.mkdir(parents=True)
    write_jsonl(cache / "aime24.jsonl", _fake_rows("cached", 3))
    folder = tmp_path / "folder"
    folder.mkdir()
    write_jsonl(folder / "aime24.jsonl", _fake_rows("folder", 2))
    with gzip.open(
        folder / "math500.jsonl.gz", "wt", encoding="utf-8"
    ) as handle:  # .gz files work in a data folder too
        handle.write(json.dumps(_fake_rows("folder500", 1)[0]) + "\n")
    assert registry.locate("aime24") == [cache / "aime24.jsonl"]  # no folder: the cache
    assert registry.locate("aime24", folder) == [folder / "aime24.jsonl"]  # the folder wins
    assert registry.locate("math500", folder) == [folder / "math500.jsonl.gz"]  # over the shipped copy too
    assert registry.locate("gsm8k", folder) == [registry.get("gsm8k").shipped_path]  # absent there: shipped
    assert registry.status("aime24", folder) == "data-dir" and registry.status("aime24") == "cached (unverified)"
    # The same through evaluation: --data-dir's rows, then the cache's.
    specs, _ = load_benchmark_config("aime24,math500")
    assert [[p.id for p in problems] for _, problems in load_benchmarks(specs, folder)] == [
        ["folder-0", "folder-1"],
        ["folder500-0"],
    ]
    assert [p.id for p in load_benchmarks(specs[:1], None)[0][1]] == ["cached-0", "cached-1", "cached-2"]
    # And through data.sources: a folder's hard.jsonl is the whole tier (no fetch needed).
    write_jsonl(folder / "hard.jsonl", _fake_rows("hard", 6, "hard"))
    dm = MathDataModule(sources={"hard": "paper:hard"}, weights={"hard": 1}, prompts_per_step=4, data_dir=str(folder))
    assert {p.id for p in dm.global_batch(0)} <= {f"hard-{i}" for i in range(6)}


def _fake_trainer():
    return SimpleNamespace(callbacks=[], datamodule=None)


def test_names_resolve_in_the_evaluation_callback():
    from lite_ppo.callbacks import Evaluation

    evaluation = Evaluation(benchmarks="math500,gsm8k", limit=3)
    with pytest.raises(ValueError, match="needs a data module"):  # raised after the files are read
        evaluation.setup(_fake_trainer(), None, "validate")
    first = {
        name: [json.loads(line)["id"] for line in jsonl_lines(_shipped_bytes(name))[:3]]
        for name in ("math500", "gsm8k")
    }
    assert {spec.name: [p.id for p in problems] for spec, problems in evaluation.benchmarks} == first
    missing = Evaluation(benchmarks="paper")
    with pytest.raises(
        registry.DatasetMissing, match=r"`lite-ppo data fetch aime24 aime25 amc23 minerva_math olympiadbench`"
    ):
        missing.setup(_fake_trainer(), None, "validate")


def test_evaluate_paper_names_every_missing_set_and_the_fetch_command(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["evaluate", "--model", "builtin:tiny", "--benchmarks", "paper", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(
        "lite-ppo evaluate: error: datasets 'aime24', 'aime25', "
        "'amc23', 'minerva_math', 'olympiadbench' not available here"
    )
    assert (
        "`lite-ppo data fetch aime24 aime25 amc23 minerva_math olympiadbench`" in err
        and "math500" not in err.split("fetch")[0]
    )


def test_evaluate_paper_with_shipped_and_folder_files(tmp_path, tiny_model_path, shared_data):
    """`--benchmarks paper`: MATH-500 from the package, the five others from --data-dir."""
    folder = tmp_path / "eval"
    folder.mkdir()
    for name in registry.PAPER_BENCHMARKS[1:]:
        (folder / registry.get(name).filename).write_bytes(
            (shared_data / "eval" / registry.get(name).filename).read_bytes()
        )
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        cli(
            [
                "evaluate",
                "--no-progress",
                "--model",
                tiny_model_path,
                "--benchmarks",
                "paper",
                "--data-dir",
                str(folder),
                "--out",
                str(out),
                "--limit",
                "1",
                "--max-new-tokens",
                "2",
            ]
        )
    assert exit_info.value.code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["benchmarks"]) == list(registry.PAPER_BENCHMARKS) == metrics["averaged"]
    records = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    first = {
        name: json.loads(jsonl_lines((shared_data / "eval" / registry.get(name).filename).read_bytes())[0])["id"]
        for name in registry.PAPER_BENCHMARKS
    }
    assert {r["benchmark"]: r["id"] for r in records} == first


# ------------------------------------------------------------------ lite-ppo data, fetch on first use
def test_data_list_shows_origin_license_and_presence(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["data", "list"])
    assert exit_info.value.code == 0
    lines = {
        line.split()[0]: line
        for line in capsys.readouterr().out.splitlines()
        if line.split() and line.split()[0] in registry.DATASETS
    }
    assert set(lines) == set(registry.DATASETS)
    assert "shipped" in lines["math500"] and "MIT" in lines["math500"]
    assert (
        "missing" in lines["aime24"]
        and "hf://HuggingFaceH4/aime_2024" in lines["aime24"]
        and "Mathematical Association" in lines["aime24"]
    )
    assert "shipped + missing" in lines["paper:hard"]


def test_data_list_shows_the_generated_tiers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["data", "list"])
    assert exit_info.value.code == 0
    names = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.split()}
    for family in ("synthetic", "testbed"):
        for tier in ("easy", "medium", "hard"):
            assert "generated" in names[f"{family}:{tier}"]
    # the easy tiers are finite: the row says how many distinct problems there are
    from lite_ppo.data.testbed import EASY_CAPACITY

    assert f"{EASY_CAPACITY} distinct" in names["testbed:easy"]


def test_data_fetch_reports_shipped_and_fails_in_one_line_without_the_hub(capsys, monkeypatch):
    def no_network(source, part):
        raise ConnectionError(f"Couldn't reach '{source.repo}' on the Hub")

    monkeypatch.setattr(registry.hub, "load_part", no_network)
    with pytest.raises(SystemExit) as exit_info:
        cli(["data", "fetch", "math500", "aime24"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert "math500: shipped with lite-ppo" in captured.out
    assert captured.err.strip().splitlines() == [
        "lite-ppo data: error: could not fetch aime24: ConnectionError: "
        "Couldn't reach 'HuggingFaceH4/aime_2024' on the Hub"
    ]


def test_missing_set_is_fetched_on_first_use(shared_data, tmp_path, monkeypatch, capsys):
    files = hub_layout("amc23", reference_rows(shared_data, "amc23"), tmp_path)
    monkeypatch.setattr(registry.hub, "load_part", local_loader(files))
    monkeypatch.setattr(registry, "_fetch_failure", None)  # no earlier failed attempt in this process
    monkeypatch.delenv("LITE_PPO_DATA_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    specs, _ = load_benchmark_config("amc23")
    ((_, problems),) = load_benchmarks(specs, None)
    assert [p.id for p in problems] == [r["id"] for r in reference_rows(shared_data, "amc23")]
    assert (
        "dataset 'amc23' is not in the cache; fetching it from hf://AI-MO/aimo-validation-amc@"
        in capsys.readouterr().err
    )
    assert registry.status("amc23") == "cached"
    # With a data folder nothing is fetched: the folder is the offline source of truth.
    monkeypatch.setattr(registry.hub, "load_part", lambda source, part: pytest.fail("fetched despite --data-dir"))
    with pytest.raises(registry.DatasetMissing, match="not in the data folder"):
        registry.locate("aime24", tmp_path)


# ------------------------------------------------------------------------------------ data-file errors
def test_non_utf8_byte_names_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"id": "1", "problem": "q", "answer": "1"}\n{"id": "2", "problem": "caf\xe9 au lait?", "answer": "2"}\n'
    )
    with pytest.raises(DataFormatError, match=r"bad.jsonl:2: field 'problem': byte 0xe9 at column 28 is not UTF-8"):
        load_jsonl_problems(path)
    path.write_bytes(b'{"id": "1", "problem": "q", "answer": "1"}\xff\n')  # outside any value
    with pytest.raises(DataFormatError, match=r"bad.jsonl:1: byte 0xff at column 43 is not UTF-8"):
        load_jsonl_problems(path)


def test_empty_file_says_it_is_empty_not_val_size(tmp_path):
    empty = tmp_path / "easy.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(DataFormatError, match=r"easy.jsonl: the file is empty"):
        MathDataModule(sources={"easy": str(empty)}, val_size=4).setup()
    with gzip.open(tmp_path / "e.jsonl.gz", "wb") as handle:
        handle.write(b"")
    with pytest.raises(DataFormatError, match=r"e.jsonl.gz: the file is empty"):
        load_problems(tmp_path / "e.jsonl.gz")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {"id": pa.array([], pa.string()), "problem": pa.array([], pa.string()), "answer": pa.array([], pa.string())}
        ),
        tmp_path / "e.parquet",
    )
    with pytest.raises(DataFormatError, match=r"e.parquet: the file is empty \(no rows\)"):
        load_problems(tmp_path / "e.parquet")


def test_gzip_bom_and_corrupt_gzip(tmp_path):
    rows = _fake_rows("g", 3)
    with gzip.open(tmp_path / "g.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))
    assert [p.id for p in load_problems(tmp_path / "g.jsonl.gz")] == ["g-0", "g-1", "g-2"]
    assert load_problems(tmp_path / "g.jsonl.gz")[0].tier == "g"  # the stem without .jsonl.gz
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps(rows[0]).encode() + b"\n")
    assert [p.id for p in load_problems(tmp_path / "bom.jsonl")] == ["g-0"]
    (tmp_path / "torn.jsonl.gz").write_bytes((tmp_path / "g.jsonl.gz").read_bytes()[:-12])
    with pytest.raises(DataFormatError, match=r"torn.jsonl.gz: not a readable gzip file"):
        load_problems(tmp_path / "torn.jsonl.gz")


def test_data_errors_are_one_line_user_errors(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"id": "1", "problem": "q"}])
    with pytest.raises(UserError) as info:
        load_problems(path)
    assert str(info.value) == f"{path}:1: field 'answer' is missing" and "\n" not in str(info.value)


def test_a_failed_fetch_on_first_use_is_not_retried_in_the_process(monkeypatch):
    calls = []

    def no_network(source, part):
        calls.append(source.repo)
        raise ConnectionError("the Hugging Face Hub (huggingface.co:443) is not reachable from here")

    monkeypatch.setattr(registry.hub, "load_part", no_network)
    monkeypatch.setattr(registry, "_fetch_failure", None)
    monkeypatch.delenv("LITE_PPO_DATA_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    for _ in range(2):
        with pytest.raises(
            registry.DatasetMissing,
            match=r"datasets 'aime24', 'aime25'.*\(fetching 'aime24' failed: the Hugging Face Hub .* not reachable",
        ):
            registry.locate_many(list(registry.PAPER_BENCHMARKS))
    assert calls == ["HuggingFaceH4/aime_2024"]  # one attempt, then the reason is reused


def test_data_path_prints_the_resolved_files(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        cli(["data", "path", "paper:medium", "gsm8k"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.split() == [
        str(registry.get("paper:medium").shipped_path),
        str(registry.get("gsm8k").shipped_path),
    ]
    with pytest.raises(SystemExit) as exit_info:
        cli(["data", "path", "paper:hard"])
    assert exit_info.value.code == 2 and "`lite-ppo data fetch paper:hard-aime`" in capsys.readouterr().err
