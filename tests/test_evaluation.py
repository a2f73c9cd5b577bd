"""Evaluation: benchmark config and files, metrics (pass@k, averages, DDP sync), the Evaluation callback."""

from __future__ import annotations

import itertools
import json
import math
import socket
from types import SimpleNamespace

import pytest
import torch

from helpers.engines import ScriptedEngine
from helpers.fits import read_scalars, tiny_fit_args
from helpers.paths import REPO
from lite_ppo.data import DataFormatError, Problem
from lite_ppo.data.validation import problem_set_batches
from lite_ppo.evaluation import (
    DEFAULT_BENCHMARKS,
    BenchmarkSpec,
    EvalMetric,
    GroupMetrics,
    apply_limit,
    average_metrics,
    default_ks,
    load_benchmark,
    load_benchmark_config,
    load_benchmarks,
    pass_at_k,
    resolve_data_dir,
    response_records,
    status_indices,
)
from lite_ppo.evaluation.report import markdown_table, text_table
from lite_ppo.rollout.engine import SamplingConfig
from lite_ppo.rollout.producer import RolloutProducer


# ---------------------------------------------------------------------------- pass@k
@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_closed_form_and_subset_enumeration(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            closed = 1 - math.comb(n - c, k) / math.comb(n, k)
            subsets = list(itertools.combinations(range(n), k))
            brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)
    assert pass_at_k(n, 0, 1) == 0.0 and pass_at_k(n, n, 1) == 1.0


def test_pass_at_k_large_n_stable_and_checked():
    assert pass_at_k(200, 3, 100) == pytest.approx(1 - math.comb(197, 100) / math.comb(200, 100))
    assert pass_at_k(16, 1, 1) == pytest.approx(1 / 16)  # pass@1 = c / n
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    assert default_ks(16) == [2, 4, 8, 16]


# ---------------------------------------------------------------------------- metrics on known outputs


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def _scripted_rollout(tokenizer, problems, script, n):
    module = SimpleNamespace(
        tokenizer=tokenizer, policy=None, model_path="", policy_version=0, device=torch.device("cpu")
    )
    producer = RolloutProducer(engine=ScriptedEngine(script))
    batch, _ = producer.produce(module, problems, SamplingConfig(n=n, greedy=True, max_new_tokens=64), seed=0)
    return batch


def test_the_bar_counts_generated_tokens_while_a_batch_runs(tiny_model_path, monkeypatch):
    """``evaluate`` on a model that writes long answers sits at 0/N for a whole batch: its bar text
    shows the tokens generated so far, ending at the batch's response tokens."""
    import tqdm.auto

    from lite_ppo.evaluation.benchmarks import BenchmarkSpec
    from lite_ppo.evaluation.runner import evaluate_problems
    from lite_ppo.rollout.hf import HFEngine
    from lite_ppo.training.module import LitePPO

    texts: list[str] = []

    class RecordingBar(tqdm.auto.tqdm):
        def set_postfix_str(self, s="", refresh=True):
            texts.append(s)
            super().set_postfix_str(s, refresh)

    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    module = LitePPO(model_path=tiny_model_path)
    module.configure_model()
    producer = RolloutProducer(engine=HFEngine(batch_size=2))
    problems = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i), "mini") for i in range(2)]
    sampling = SamplingConfig(n=2, max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=0)
    benchmarks = [(BenchmarkSpec("mini", "mini.jsonl"), problems)]
    _, records, timing = evaluate_problems(module, producer, benchmarks, sampling)
    counts = [int(t.split("(")[1].split(" tokens")[0].replace(",", "")) for t in texts if " tokens)" in t]
    assert len(counts) >= 2 and counts == sorted(counts), texts  # shown while generating, growing
    assert counts[-1] == timing["mini"]["response_tokens"] == sum(r["length"] for r in records)
    assert producer.engine.on_tokens is None  # left as found


def test_metrics_on_known_outputs_through_the_reward(tiny_tokenizer):
    """Right, wrong, unparseable and truncated responses scored by the real MathVerifyReward."""
    problems = [Problem("p1", "What is 6 * 7?", "42", "b"), Problem("p2", "What is 3 + 4?", "7", "b")]
    script = [
        [("So the answer is \\boxed{42}.", True), ("So the answer is \\boxed{41}.", True)],  # right, wrong
        [("I cannot solve this.", True), ("First we add 3 and", False)],  # unparseable, truncated (wrong)
    ]
    batch = _scripted_rollout(tiny_tokenizer, problems, script, n=2)
    records = response_records("b", problems, batch)
    assert [r["status"] for r in records] == ["correct", "wrong", "unparsed", "wrong"]
    assert [r["extracted"] for r in records] == ["42", "41", None, "3"]
    assert [r["truncated"] for r in records] == [False, False, False, True]

    metrics = GroupMetrics(["b"], num_samples=2)
    metrics.update_rollout("b", problems, batch)
    out = metrics.compute()["groups"]["b"]
    lengths = [len(tiny_tokenizer.encode(t, add_special_tokens=False)) + f for resp in script for t, f in resp]
    assert out["accuracy"] == 0.25 and out["mean@2"] == 0.25
    assert out["pass@2"] == 0.5  # p1 has one correct of two, p2 none
    assert out["unparsed_rate"] == 0.25
    assert out["truncation_rate"] == 0.25
    assert out["response_length"] == pytest.approx(sum(lengths) / 4)
    assert out["status/wrong"] == 0.5
    assert (out["num_problems"], out["num_responses"]) == (2, 4)

    # The same numbers from the records alone (what the command writes to responses.jsonl).
    again = GroupMetrics(["b"], num_samples=2)
    again.update_records("b", records)
    assert again.compute()["groups"]["b"] == out


def test_padding_rows_are_not_counted(tiny_tokenizer):
    problems = [Problem("p1", "q", "42", "b"), Problem("p1", "q", "42", "b")]
    batch = _scripted_rollout(tiny_tokenizer, problems, [[("\\boxed{42}", True)], [("\\boxed{42}", True)]], n=1)
    metrics = GroupMetrics(["b"])
    metrics.update_rollout("b", problems, batch, valid=[True, False])
    assert metrics.compute()["groups"]["b"]["num_problems"] == 1


def test_eval_metric_accumulates_and_checks_shapes():
    metric = EvalMetric(num_samples=4, ks=[1, 2, 4])
    metric.update(
        status_indices([["correct", "wrong", "wrong", "wrong"]]),
        torch.full((1, 4), 10),
        torch.zeros(1, 4, dtype=torch.bool),
    )
    metric.update(
        status_indices([["timeout", "error", "no_box", "correct"]]),
        torch.full((1, 4), 30),
        torch.ones(1, 4, dtype=torch.bool),
    )
    out = metric.compute()
    assert float(out["accuracy"]) == pytest.approx(2 / 8)
    assert float(out["pass@1"]) == pytest.approx(0.25)
    assert float(out["pass@2"]) == pytest.approx((pass_at_k(4, 1, 2) * 2) / 2)
    assert float(out["pass@4"]) == 1.0
    assert float(out["unparsed_rate"]) == pytest.approx(3 / 8)
    assert float(out["truncation_rate"]) == 0.5 and float(out["response_length"]) == 20.0
    with pytest.raises(ValueError, match="shape"):
        metric.update(status_indices([["correct"]]), torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="unknown reward status"):
        status_indices([["maybe"]])
    with pytest.raises(ValueError):
        EvalMetric(num_samples=2, ks=[4])


# ---------------------------------------------------------------------------- averages
def test_average_unweighted_and_weighted_by_hand():
    per = {
        "a": {"accuracy": 0.5, "response_length": 100.0, "num_problems": 10.0, "num_responses": 10.0},
        "b": {"accuracy": 0.1, "response_length": 300.0, "num_problems": 30.0, "num_responses": 30.0},
        "c": {"accuracy": 0.9, "response_length": 50.0, "num_problems": 60.0, "num_responses": 60.0},
    }
    avg = average_metrics(per, include=["a", "b"])
    assert avg["average"]["accuracy"] == pytest.approx((0.5 + 0.1) / 2)
    assert avg["weighted_average"]["accuracy"] == pytest.approx((0.5 * 10 + 0.1 * 30) / 40)
    assert avg["average"]["response_length"] == pytest.approx(200.0)
    assert avg["average"]["num_problems"] == avg["weighted_average"]["num_problems"] == 40.0
    every = average_metrics(per)
    assert every["average"]["accuracy"] == pytest.approx(0.5)
    assert every["weighted_average"]["accuracy"] == pytest.approx((5 + 3 + 54) / 100)


def test_group_metrics_average_excludes_benchmarks_outside_the_average():
    metrics = GroupMetrics(["x", "y", "gsm"], averaged=["x", "y"])
    metrics.update_records(
        "x",
        [{"status": "correct", "length": 1, "truncated": False}] * 3
        + [{"status": "wrong", "length": 1, "truncated": False}],
    )
    metrics.update_records("y", [{"status": "wrong", "length": 1, "truncated": False}] * 2)
    metrics.update_records("gsm", [{"status": "correct", "length": 1, "truncated": False}] * 5)
    results = metrics.compute()
    assert results["average"]["accuracy"] == pytest.approx((0.75 + 0.0) / 2)
    assert results["weighted_average"]["accuracy"] == pytest.approx(3 / 6)
    md = markdown_table(results, {"x": "X-Bench"})
    assert "| X-Bench | 4 | 75.0 |" in md and "| average | 6 | 37.5 |" in md and "| weighted average | 6 | 50.0 |" in md
    assert "gsm" in text_table(results)


def _headers(md: str) -> list[str]:
    return [cell.strip() for cell in md.splitlines()[0].strip("|").split("|")]


def test_the_accuracy_column_is_named_for_what_it_is():
    """docs/evaluation.md: accuracy is greedy pass@1. Sampled responses are scored as their mean (mean@n),
    so the table never calls a sampled mean "accuracy": 4 samples show mean@4 alone, one greedy response
    "accuracy % (greedy)", one sampled response "mean@1 %"."""
    sampled = GroupMetrics(["x"], num_samples=4)
    statuses = ["correct", "wrong", "wrong", "wrong", "correct", "correct", "wrong", "no_box"]  # 2 problems x 4
    sampled.update_records("x", [{"status": s, "length": 5, "truncated": False} for s in statuses])
    for greedy in (False, None):
        headers = _headers(markdown_table(sampled.compute(), greedy=greedy))
        assert "mean@4 %" in headers and not [h for h in headers if h.startswith("accuracy")], headers
    row = markdown_table(sampled.compute()).splitlines()[2].strip("|").split("|")
    assert float(row[headers.index("mean@4 %")]) == pytest.approx(100 * 3 / 8, abs=0.05)

    single = GroupMetrics(["x"])
    single.update_records("x", [{"status": "correct", "length": 5, "truncated": False}])
    assert "accuracy % (greedy)" in _headers(markdown_table(single.compute(), greedy=True))
    assert "mean@1 %" in _headers(markdown_table(single.compute(), greedy=False))
    assert "accuracy % (greedy)" in text_table(single.compute(), greedy=True).splitlines()[0]


# ---------------------------------------------------------------------------- DDP: metric sync
def test_metrics_sync_across_two_processes_equals_one_process(tmp_path):
    from helpers.eval_ddp import ddp_records, worker

    single = GroupMetrics(["a", "b"], num_samples=2)
    for group, records in ddp_records():
        single.update_records(group, records)
    expected = single.compute()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ddp.json"
    torch.multiprocessing.spawn(worker, args=(2, port, str(out)), nprocs=2, join=True)
    got = json.loads(out.read_text())
    for group in ("a", "b"):
        for key, value in expected["groups"][group].items():
            assert got["groups"][group][key] == pytest.approx(value), (group, key)
    assert got["average"]["accuracy"] == pytest.approx(expected["average"]["accuracy"])


# ---------------------------------------------------------------------------- benchmark config and files
def test_registry_and_shipped_yaml_agree():
    specs, data_dir = load_benchmark_config(REPO / "configs/eval/benchmarks.yaml")
    assert data_dir is None  # never ship a data location
    assert specs == list(DEFAULT_BENCHMARKS)
    assert [s.file for s in specs] == [
        "math500.jsonl",
        "aime24.jsonl",
        "aime25.jsonl",
        "amc23.jsonl",
        "minerva_math.jsonl",
        "olympiadbench.jsonl",
        "gsm8k_test.jsonl",
    ]
    assert [s.name for s in specs if not s.in_average] == ["gsm8k"]


def test_every_shared_benchmark_file_loads(shared_data):
    loaded = load_benchmarks(DEFAULT_BENCHMARKS, shared_data / "eval")
    counts = {spec.name: len(problems) for spec, problems in loaded}
    assert counts == {
        "math500": 500,
        "aime24": 30,
        "aime25": 30,
        "amc23": 40,
        "minerva_math": 272,
        "olympiadbench": 675,
        "gsm8k": 1319,
    }
    limited = load_benchmarks(apply_limit(DEFAULT_BENCHMARKS, 3), shared_data / "eval")
    first_gsm8k = [
        json.loads(line)["id"] for line in (shared_data / "eval/gsm8k_test.jsonl").read_text().splitlines()[:3]
    ]
    assert [p.id for p in limited[-1][1]] == first_gsm8k
    assert all(p.tier == "gsm8k" for p in limited[-1][1])


def test_config_forms_and_limits(tmp_path):
    specs, _ = load_benchmark_config("aime24, gsm8k")
    assert [s.name for s in specs] == ["aime24", "gsm8k"]
    cfg = tmp_path / "b.yaml"
    cfg.write_text(
        "data_dir: /somewhere\nbenchmarks:\n  - {name: gsm8k, "
        "limit: 50}\n  - {name: mine, file: my.jsonl, title: Mine}\n"
    )
    specs, data_dir = load_benchmark_config(cfg)
    assert data_dir == "/somewhere"
    assert specs[0] == BenchmarkSpec("gsm8k", "gsm8k_test.jsonl", "GSM8K", limit=50, in_average=False, dataset="gsm8k")
    assert (
        apply_limit(specs, 20)[0].limit == 20
        and apply_limit(specs, 100)[0].limit == 50
        and apply_limit(specs, 20)[1].limit == 20
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("benchmarks:\n  - {name: a, file: a.jsonl, lmit: 3}\n", "b.yaml: benchmarks\\[0\\]: unknown key\\(s\\) lmit"),
        ("benchmarks:\n  - {name: a}\n", "b.yaml: benchmarks\\[0\\]: 'file' is missing"),
        ("benchmarks:\n  - {name: a, file: a.jsonl}\n  - {name: a, file: b.jsonl}\n", "appears twice"),
        ("benchmarks:\n  - {name: a, file: a.jsonl, limit: 0}\n", "limit"),
        ("benchmarks:\n  - {name: average, file: a.jsonl}\n", "reserved"),
        ("benchmarks:\n  - nosuch\n", "unknown benchmark 'nosuch'"),
        ("bench: []\n", "'benchmarks' list"),
    ],
)
def test_bad_config_names_the_problem(tmp_path, text, message):
    cfg = tmp_path / "b.yaml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_benchmark_config(cfg)


def test_missing_and_malformed_files_name_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="benchmark 'gone'.*gone.jsonl"):
        load_benchmark(BenchmarkSpec("gone", "gone.jsonl"), tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "problem": "q", "answer": "1", "source": "s"}\n{"id": "2", "problem": "q"}\n')
    with pytest.raises(DataFormatError, match="bad.jsonl:2: field 'answer' is missing"):
        load_benchmarks([BenchmarkSpec("bad", "bad.jsonl")], tmp_path)
    bad.write_text('{"id": "1", "problem": "q", "answer": "1"}\nnot json\n')
    with pytest.raises(DataFormatError, match="bad.jsonl:2: invalid JSON"):
        load_benchmark(BenchmarkSpec("bad", str(bad)), None)  # absolute path, no data_dir
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_data_dir(tmp_path / "nope")


def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("LITE_PPO_EVAL_DIR", raising=False)
    assert resolve_data_dir(None, None) is None  # registered sets then come from the package / the cache
    monkeypatch.setenv("LITE_PPO_EVAL_DIR", str(tmp_path))
    assert resolve_data_dir(None, None) == tmp_path
    (tmp_path / "x").mkdir()
    assert resolve_data_dir(None, str(tmp_path / "x")) == tmp_path / "x"


@pytest.mark.parametrize("world", [1, 2, 3])
def test_benchmark_batches_cover_every_problem_once_across_ranks(world):
    problems = [Problem(str(i), "q", "1", "b") for i in range(7)]
    per_rank = [problem_set_batches([("b", problems)], batch_size=4, rank=r, world_size=world) for r in range(world)]
    assert len({len(items) for items in per_rank}) == 1  # ranks stay in step
    counted = [p.id for items in per_rank for it in items for p, ok in zip(it["problems"], it["valid"]) if ok]
    assert sorted(counted, key=int) == [str(i) for i in range(7)]
    assert all(it["problems"] for items in per_rank for it in items)  # no rank gets an empty batch


# ---------------------------------------------------------------------------- the callback in a fit
def test_evaluation_callback_in_fit_logs_per_benchmark_and_before_after(tmp_path, tiny_model_path, shared_data, capsys):
    from lite_ppo.cli import main

    main(
        tiny_fit_args(
            tmp_path,
            "--trainer.enable_progress_bar=false",
            "--trainer.val_check_interval=2",
            "--trainer.callbacks+=lite_ppo.callbacks.Evaluation",
            "--trainer.callbacks.benchmarks=gsm8k,aime24",
            f"--trainer.callbacks.data_dir={shared_data / 'eval'}",
            "--trainer.callbacks.limit=3",
            "--trainer.callbacks.batch_size=2",
            "--trainer.callbacks.evaluate_before_training=true",
            f"--trainer.callbacks.output_dir={tmp_path / 'evals'}",
            "--data.val_size=2",
        )
    )
    scalars = read_scalars(tmp_path / "tb")
    for tag in (
        "eval/gsm8k/accuracy",
        "eval/aime24/accuracy",
        "eval/average/accuracy",
        "eval/weighted_average/accuracy",
        "eval/gsm8k/truncation_rate",
        "eval/gsm8k/unparsed_rate",
        "eval/gsm8k/response_length",
        "val/easy/accuracy",
    ):
        assert tag in scalars, f"missing {tag}; have {sorted(k for k in scalars if k.startswith(('eval', 'val')))}"
        # before training (step 0) and after 2 training steps (val_check_interval=2 of 3 steps)
        assert [step for step, _ in scalars[tag]] == [0, 2], tag
    assert [v for _, v in scalars["eval/gsm8k/num_problems"]] == [3, 3]
    # gsm8k is outside the paper's average: the average is aime24's value
    assert scalars["eval/average/accuracy"] == scalars["eval/aime24/accuracy"]
    out = capsys.readouterr().out
    assert "Evaluation (before training)" in out and "Evaluation (after 2 training steps)" in out
    assert "Accuracy before training and after 2 training steps" in out
    report = json.loads((tmp_path / "evals/step_2/metrics.json").read_text())
    assert report["benchmarks"]["gsm8k"]["num_problems"] == 3 and report["tiers"]["groups"]["easy"]["num_problems"] == 2
    lines = (tmp_path / "evals/step_0/responses.rank0.jsonl").read_text().splitlines()
    assert len(lines) == 3 + 3 + 3 * 2  # two benchmarks and three held-out tiers of 2


def test_every_held_out_evaluation_writes_per_problem_results(tmp_path):
    """A short testbed fit (before training and after its 2 steps) writes ``heldout/step_<step>.json`` into
    the run folder at the steps the ``val/<tier>/*`` scalars are logged at: one entry per held-out problem,
    the ids of the data module's split (rebuilt here at another data seed: ``heldout_seed`` fixes it),
    sorted by (tier, id), and each tier's share of ``correct`` is its logged ``val/<tier>/accuracy``."""
    from lite_ppo.cli import main
    from lite_ppo.data import MathDataModule

    main(
        [
            *("fit", "--config", str(REPO / "configs/recipes/lite_ppo.yaml")),
            *("--config", str(REPO / "configs/models/testbed_base.yaml")),
            *("--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar=false"),
            *("--trainer.logger.init_args.save_dir", str(tmp_path / "tb"), "--trainer.logger.init_args.version", "run"),
            # 4 optimizer steps per training step (the config): the file is named by the logged step, not by those.
            *("--data.prompts_per_step=4", "--data.steps_per_epoch=2"),
            # 3 tiers x 12 in batches of 16: a batch holds two tiers, the last one a part of a tier.
            *("--data.val_size=12", "--data.val_batch_size=16"),
            *("--trainer.callbacks+=lite_ppo.callbacks.Evaluation", "--trainer.callbacks.benchmarks=[]"),
            "--trainer.callbacks.evaluate_before_training=true",
        ]
    )
    (run,) = {path.parent.parent for path in (tmp_path / "tb").rglob("heldout/step_*.json")}
    files = {path.name: json.loads(path.read_text()) for path in (run / "heldout").iterdir()}
    assert sorted(files) == ["step_0.json", "step_2.json"]  # no temporary file left behind
    expected = MathDataModule(
        sources={t: f"testbed:{t}" for t in ("easy", "medium", "hard")}, val_size=12, heldout_seed=0, seed=5
    ).held_out()
    expected_ids = sorted((p.tier, p.id) for p in expected)
    scalars = read_scalars(run)
    verdicts = set()
    for name, content in files.items():
        step = int(name[len("step_") : -len(".json")])
        assert set(content) == {"step", "problems"} and content["step"] == step
        rows = content["problems"]
        assert all(set(row) == {"id", "tier", "correct"} and isinstance(row["correct"], bool) for row in rows)
        assert [(row["tier"], row["id"]) for row in rows] == expected_ids
        for tier in ("easy", "medium", "hard"):
            correct = [row["correct"] for row in rows if row["tier"] == tier]
            logged = dict(scalars[f"val/{tier}/accuracy"])[step]
            assert sum(correct) / len(correct) == pytest.approx(logged, abs=1e-6), (step, tier)
            verdicts.update(correct)
    assert verdicts == {True, False}  # the base-like init gets part of them right: the shares are not trivial


def test_no_per_problem_results_with_several_samples_per_problem(tmp_path):
    """With ``eval_sampling.n > 1`` a problem has no single verdict: validation runs and logs, and no
    per-problem file is written."""
    from lite_ppo.cli import main

    main(
        tiny_fit_args(
            tmp_path,
            "--trainer.enable_progress_bar=false",
            "--data.val_size=2",
            "--data.steps_per_epoch=1",
            '--rollout.eval_sampling={"n": 2, "greedy": false, "temperature": 1.0, "max_new_tokens": 8}',
        )
    )
    scalars = read_scalars(tmp_path / "tb")
    assert [step for step, _ in scalars["val/easy/accuracy"]] == [1]
    assert "val/easy/mean@2" in scalars
    assert not list((tmp_path / "tb").rglob("heldout"))


def test_before_after_table_with_held_out_tiers_only(capsys):
    """The quickstart evaluates only the held-out training tiers (no benchmark files): the
    before/after table then lists the tiers, and no empty benchmark table is printed."""
    from lite_ppo.callbacks import Evaluation

    callback = Evaluation(benchmarks=[])
    no_benchmarks = {"groups": {}}
    tiers = lambda easy, hard: {"groups": {"easy": {"accuracy": easy}, "hard": {"accuracy": hard}}}  # noqa: E731
    callback.before = {"step": 0, "results": no_benchmarks, "tiers": tiers(0.12, 0.25)}
    callback.history = [{"step": 6, "results": no_benchmarks, "tiers": tiers(0.42, 0.25)}]
    callback.on_fit_end(SimpleNamespace(is_global_zero=True), None)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "Accuracy before training and after 6 training steps:"
    assert lines[1].split() == ["held-out", "tier", "accuracy", "before", "%", "accuracy", "after", "%", "change"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["easy"] == ["12.0", "42.0", "+30.0"] and rows["hard"] == ["25.0", "25.0", "+0.0"]
    assert "benchmark" not in "\n".join(lines)


def test_no_before_after_table_without_an_evaluation_before_training(capsys):
    """Without ``evaluate_before_training`` there is nothing to compare with: the after-training table
    (printed at the validation) stands alone, no before/after table of dashes follows."""
    from lite_ppo.callbacks import Evaluation

    callback = Evaluation(benchmarks=[])
    callback.history = [{"step": 6, "results": {"groups": {}}, "tiers": {"groups": {"easy": {"accuracy": 0.42}}}}]
    callback.on_fit_end(SimpleNamespace(is_global_zero=True), None)
    assert capsys.readouterr().out == ""


def test_evaluation_setup_configures_the_data_module_and_patches_nothing(tmp_path):
    """``setup`` hands the benchmarks to ``MathDataModule.configure_validation`` (no replaced
    ``val_dataloader``, no trainer setting changed); with ``evaluate_before_training`` it asks for
    ``num_sanity_val_steps=-1`` rather than setting it."""
    from lite_ppo.callbacks import Evaluation, Rollout
    from lite_ppo.data import MathDataModule
    from lite_ppo.errors import UserError

    bench = tmp_path / "mini.jsonl"
    rows = [{"id": f"m{i}", "problem": f"{i} + 1?", "answer": str(i + 1), "source": "mini"} for i in range(3)]
    bench.write_text("".join(json.dumps(row) + "\n" for row in rows))
    dm = MathDataModule(prompts_per_step=4, val_size=1)
    dm.setup("validate")
    trainer = SimpleNamespace(
        callbacks=[],
        datamodule=dm,
        num_sanity_val_steps=0,
        fast_dev_run=False,
        global_rank=0,
        world_size=1,
    )
    dm.trainer = trainer
    evaluation = Evaluation(benchmarks=[{"name": "mini", "file": str(bench)}], batch_size=2)
    evaluation.setup(trainer, None, "validate")
    assert "val_dataloader" not in vars(dm) and trainer.num_sanity_val_steps == 0
    served = [(item.get("benchmark"), len(item["problems"])) for item in dm.val_dataloader()]
    assert served == [(None, 3), ("mini", 2), ("mini", 1)]
    # The metrics come with the run's settings (LitePPO.setup hands them over after every callback's
    # setup): sized by eval_sampling.n, one group per held-out tier; no other callback looked up.
    assert evaluation.metrics is None
    evaluation.configure_run(Rollout(engine=ScriptedEngine([]), eval_sampling=SamplingConfig(n=3)).settings)
    assert evaluation.tier_metrics.groups == ["easy", "medium", "hard"] and evaluation.metrics.groups == ["mini"]
    assert evaluation.tier_metrics.num_samples == evaluation.metrics.num_samples == 3
    too_few = r"pass_k=\[4\] needs rollout.eval_sampling.n >= 4 samples per problem, got n=3"
    with pytest.raises(UserError, match=too_few):
        Evaluation(benchmarks=[], pass_k=[4]).configure_run(
            Rollout(engine=ScriptedEngine([]), eval_sampling=SamplingConfig(n=3)).settings
        )

    before = Evaluation(benchmarks=[], evaluate_before_training=True)
    with pytest.raises(UserError, match="num_sanity_val_steps=-1"):
        before.setup(trainer, None, "fit")
    trainer.num_sanity_val_steps = float("inf")  # what Trainer(num_sanity_val_steps=-1) holds
    before.setup(trainer, None, "fit")


def test_a_validation_step_without_scored_responses_is_one_line_not_silence():
    """Evaluation under a module whose validation_step returns no rollout (not LitePPO's) would log no
    metric and say nothing: it stops with one line naming the module and what it returned."""
    from lite_ppo.callbacks import Evaluation
    from lite_ppo.errors import UserError

    class OtherModule:
        pass

    callback = Evaluation(benchmarks=[])
    with pytest.raises(UserError, match=r"^Evaluation reads .* OtherModule.validation_step returned dict$"):
        callback.on_validation_batch_end(None, OtherModule(), {"loss": 0.0}, {"problems": []}, 0)


def _maj_by_hand(rows: list[dict], k: int) -> float:
    """maj@k of one problem from its records, apart from lite_ppo.evaluation.majority: judged answers vote,
    equal numbers (or equal texts) are one answer, the correct ones one class; a tie shares the point."""

    def key(answer: str) -> object:
        try:
            return float(answer.replace(",", ""))
        except ValueError:
            return answer.strip()

    votes: dict[object, int] = {}
    correct = 0
    for row in rows[:k]:
        if row["status"] == "correct":
            correct += 1
        elif row["status"] == "wrong" and row["extracted"] is not None:
            votes[key(row["extracted"])] = votes.get(key(row["extracted"]), 0) + 1
    top = max([correct, *votes.values()])
    if top == 0 or correct < top:
        return 0.0
    return 1.0 / (1 + sum(count == top for count in votes.values()))


@pytest.mark.slow
def test_maj_at_k_of_a_sampled_held_out_evaluation_reaches_tensorboard(tmp_path, tiny_model_path):
    """A fit whose held-out tiers are sampled 4 times: val/<tier>/maj@2 and maj@4 are logged at each
    evaluation and equal the majority vote recomputed from the written responses."""
    from lite_ppo.cli import main

    main(
        tiny_fit_args(
            tmp_path,
            "--trainer.enable_progress_bar=false",
            "--data.steps_per_epoch=1",
            "--data.val_size=12",
            "--rollout.eval_sampling.n=4",
            "--rollout.eval_sampling.greedy=false",
            "--rollout.eval_sampling.temperature=0.5",
            "--trainer.callbacks+=lite_ppo.callbacks.Evaluation",
            "--trainer.callbacks.benchmarks=[]",
            f"--trainer.callbacks.output_dir={tmp_path / 'evals'}",
        )
    )
    scalars = read_scalars(tmp_path / "tb")
    lines = (tmp_path / "evals/step_1/responses.rank0.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    tiers = sorted({r["benchmark"] for r in records})
    assert tiers and len(records) == 4 * sum(1 for r in records if r["sample"] == 0)
    voted, won = 0, []
    for tier in tiers:
        by_problem: dict[str, list[dict]] = {}
        for r in sorted((r for r in records if r["benchmark"] == tier), key=lambda r: r["sample"]):
            by_problem.setdefault(r["id"], []).append(r)
        voted += sum(r["status"] in ("correct", "wrong") for rows in by_problem.values() for r in rows)
        won += [_maj_by_hand(rows, 4) for rows in by_problem.values()]
        for k in (2, 4):
            tag = f"val/{tier}/maj@{k}"
            assert tag in scalars, sorted(t for t in scalars if t.startswith("val/"))
            expected = sum(_maj_by_hand(rows, k) for rows in by_problem.values()) / len(by_problem)
            assert scalars[tag][-1][1] == pytest.approx(expected, abs=1e-6), (tag, scalars[tag])
    assert voted > 0  # the smoke model answers: the votes are real, not all abstentions
    assert 0 < sum(won) < len(won), won  # some problems won by the right answer, some lost: a stuck maj@k fails
