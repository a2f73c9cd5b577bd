"""``lite-ppo evaluate`` end to end: every real benchmark file, the three reports, checkpoints,
and an independent math-verify check of SmolLM2's GSM8K accuracy."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from helpers.paths import REPO
from lite_ppo.cli import main
from lite_ppo.evaluation import DEFAULT_BENCHMARKS, pass_at_k

LIMIT = 2


def _evaluate(*args: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--no-progress", *args])
    assert exit_info.value.code == 0


def _read(out: Path):
    metrics = json.loads((out / "metrics.json").read_text())
    records = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    return metrics, records, (out / "metrics.md").read_text()


def _first_ids(path: Path, n: int) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()[:n]]


def test_evaluate_tiny_model_on_every_benchmark(tmp_path, tiny_model_path, shared_data):
    out = tmp_path / "out"
    _evaluate(
        "--model",
        tiny_model_path,
        "--benchmarks",
        str(REPO / "configs/eval/benchmarks.yaml"),
        "--data-dir",
        str(shared_data / "eval"),
        "--out",
        str(out),
        "--limit",
        str(LIMIT),
        "--max-new-tokens",
        "8",
    )
    metrics, records, markdown = _read(out)
    names = [s.name for s in DEFAULT_BENCHMARKS]
    assert list(metrics["benchmarks"]) == names
    assert metrics["sampling"]["greedy"] is True and metrics["sampling"]["n"] == 1
    assert metrics["averaged"] == [n for n in names if n != "gsm8k"]

    by_benchmark = defaultdict(list)
    for record in records:
        by_benchmark[record["benchmark"]].append(record)
        assert set(record) >= {
            "id",
            "benchmark",
            "prompt",
            "response",
            "answer",
            "extracted",
            "status",
            "correct",
            "length",
            "truncated",
        }
        assert record["correct"] == (record["status"] == "correct")
        assert 1 <= record["length"] <= 8
        assert "Please reason step by step" in record["prompt"]  # the training prompt template
    for spec in DEFAULT_BENCHMARKS:
        rows, m = by_benchmark[spec.name], metrics["benchmarks"][spec.name]
        # The first LIMIT problems of each real file, in file order, one response each.
        assert [r["id"] for r in rows] == _first_ids(shared_data / "eval" / spec.file, LIMIT)
        assert m["num_problems"] == m["num_responses"] == LIMIT
        # Metrics recomputed from the JSONL verdicts.
        assert m["accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / LIMIT)
        assert m["truncation_rate"] == pytest.approx(sum(r["truncated"] for r in rows) / LIMIT)
        assert m["response_length"] == pytest.approx(sum(r["length"] for r in rows) / LIMIT)
        unparsed = sum(r["status"] in ("unparsed", "no_box", "timeout", "error") for r in rows)
        assert m["unparsed_rate"] == pytest.approx(unparsed / LIMIT)
        assert f"| {spec.display} | {LIMIT} | {100 * m['accuracy']:.1f} |" in markdown
    averaged = [metrics["benchmarks"][n]["accuracy"] for n in metrics["averaged"]]
    assert metrics["average"]["accuracy"] == pytest.approx(sum(averaged) / len(averaged))
    assert metrics["weighted_average"]["num_problems"] == LIMIT * 6
    assert "| average |" in markdown and "| weighted average |" in markdown


def test_evaluate_sampled_reports_mean_and_pass_at_k(tmp_path, tiny_model_path, shared_data):
    out = tmp_path / "out"
    _evaluate(
        "--model",
        "builtin:tiny",
        "--benchmarks",
        "gsm8k,amc23",
        "--data-dir",
        str(shared_data / "eval"),
        "--out",
        str(out),
        "--limit",
        "2",
        "--n",
        "4",
        "--temperature",
        "1.0",
        "--max-new-tokens",
        "4",
    )
    metrics, records, table = _read(out)
    # metrics.md names the sampled mean mean@4; no column calls it accuracy (greedy pass@1 in the docs).
    header = next(line for line in table.splitlines() if line.startswith("| benchmark |"))
    headers = [cell.strip() for cell in header.strip("|").split("|")]
    assert "mean@4 %" in headers and not [h for h in headers if h.startswith("accuracy")], headers
    assert metrics["sampling"] == {
        "n": 4,
        "greedy": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": 4,
    }
    for name in ("gsm8k", "amc23"):
        m = metrics["benchmarks"][name]
        rows = [r for r in records if r["benchmark"] == name]
        assert len(rows) == 8 and m["num_responses"] == 8
        assert sorted({r["sample"] for r in rows}) == [0, 1, 2, 3]
        assert m["mean@4"] == m["accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / 8)
        per_problem = defaultdict(int)
        for r in rows:
            per_problem[r["id"]] += r["correct"]
        for k in (2, 4):
            assert m[f"pass@{k}"] == pytest.approx(sum(pass_at_k(4, c, k) for c in per_problem.values()) / 2)


def test_evaluate_loads_lightning_checkpoint_weights(tmp_path, tiny_model_path, shared_data):
    from lite_ppo.evaluation.runner import load_policy_module
    from lite_ppo.training.module import LitePPO

    module = LitePPO(model_path=tiny_model_path)
    module.configure_model()
    with torch.no_grad():
        for p in module.policy.parameters():
            p.add_(0.01)
    ckpt = tmp_path / "step.ckpt"
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(), "policy_version": 6}, ckpt)

    loaded = load_policy_module(str(ckpt))
    assert loaded.policy_version == 6
    for (name, a), b in zip(module.policy.state_dict().items(), loaded.policy.state_dict().values()):
        assert torch.equal(a, b), name

    _evaluate(
        "--model",
        str(ckpt),
        "--benchmarks",
        "aime25",
        "--data-dir",
        str(shared_data / "eval"),
        "--out",
        str(tmp_path / "o"),
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
    )
    metrics, records, _ = _read(tmp_path / "o")
    assert metrics["model"] == str(ckpt) and len(records) == 1

    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        load_policy_module(str(tmp_path / "missing.ckpt"))


def test_vllm_engine_runs_in_the_policy_dtype(tmp_path):
    """vLLM's own "auto" runs a float32 checkpoint in bfloat16; the command's engine must compute in
    the dtype the policy is loaded in (--dtype), unless a config names the engine (its dtype wins)."""
    pytest.importorskip("vllm")
    from lite_ppo.errors import UserError
    from lite_ppo.evaluation.command import build_parser, rollout_from_args

    def engine(*extra: str):
        args = build_parser().parse_args(
            ["--model", "builtin:tiny", "--out", str(tmp_path), "--engine", "vllm", *extra]
        )
        return rollout_from_args(args)[0].engine

    assert engine().dtype == "float32"  # the command's default policy dtype
    assert engine("--dtype", "bfloat16").dtype == "bfloat16"
    with pytest.raises(UserError, match="float16 is not supported by the vLLM engine"):
        engine("--dtype", "float16")
    configured = tmp_path / "vllm.yaml"
    configured.write_text(
        "rollout:\n  engine: {class_path: lite_ppo.rollout.VLLMEngine, init_args: {dtype: bfloat16}}\n"
    )
    assert engine("--config", str(configured)).dtype == "bfloat16"


def test_evaluate_fails_before_loading_a_model_on_a_bad_file(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('{"id": "1", "problem": "q", "answer": ""}\n')
    cfg = tmp_path / "b.yaml"
    cfg.write_text("benchmarks:\n  - {name: bad, file: bad.jsonl}\n")
    # Data errors are user errors: one line naming file, line and field, exit 2, no traceback.
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "evaluate",
                "--model",
                "builtin:tiny",
                "--benchmarks",
                str(cfg),
                "--data-dir",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert exit_info.value.code == 2
    assert "bad.jsonl:1: field 'answer' is empty" in capsys.readouterr().err
    # A registered set that is neither in --data-dir, shipped nor cached: named, with the fetch command.
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "evaluate",
                "--model",
                "builtin:tiny",
                "--benchmarks",
                "aime24",
                "--data-dir",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "'aime24'" in err
        and "`lite-ppo data fetch aime24`" in err
        and "aime24.jsonl" in err
        and len(err.strip().splitlines()) == 1
    )


def test_evaluate_uses_training_config_prompt_and_reward(tmp_path, tiny_model_path, shared_data):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        "rollout:\n"
        "  prompt: {style: plain, instruction: 'Box the answer.'}\n"
        "  reward: {require_boxed: true, timeout_seconds: 2}\n"
        "  eval_sampling: {n: 1, greedy: true, max_new_tokens: 3}\n"
    )
    _evaluate(
        "--model",
        tiny_model_path,
        "--config",
        str(cfg),
        "--benchmarks",
        "gsm8k",
        "--data-dir",
        str(shared_data / "eval"),
        "--out",
        str(tmp_path / "o"),
        "--limit",
        "1",
    )
    metrics, records, _ = _read(tmp_path / "o")
    assert metrics["prompt"]["style"] == "plain" and records[0]["prompt"].endswith("Box the answer.\nAnswer:")
    assert metrics["reward"]["require_boxed"] is True and metrics["sampling"]["max_new_tokens"] == 3
    assert records[0]["status"] == "no_box"


def test_evaluate_config_section_has_the_rollout_callbacks_arguments():
    """``--config`` reads ``rollout:`` with the types fit reads it with: the keys, defaults and type
    hints of ``lite_ppo.callbacks.Rollout``'s arguments."""
    import inspect
    import typing

    from lite_ppo.callbacks import Rollout
    from lite_ppo.evaluation.command import rollout_section_parser

    parser = rollout_section_parser()
    keys = {a.dest.removeprefix("rollout."): a for a in parser._actions if a.dest.startswith("rollout.")}
    actions = {key: action for key, action in keys.items() if "." not in key}  # not the nested ".help" actions
    params = {name: p for name, p in inspect.signature(Rollout.__init__).parameters.items() if name != "self"}
    hints = typing.get_type_hints(Rollout.__init__)
    assert set(actions) == set(params)
    for name, param in params.items():
        assert actions[name].default == param.default, name
        assert actions[name]._typehint == hints[name], name  # jsonargparse keeps the type an argument was declared with


def test_evaluate_config_reads_a_training_config_as_fit_does(tmp_path):
    """Two training YAMLs (recipe + model, with trainer/model/data sections): later files win key by
    key, and a ``class_path`` engine keeps its class when the next file sets one of its arguments."""
    from lite_ppo.evaluation.command import build_parser, rollout_from_args
    from lite_ppo.rollout.hf import HFEngine

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "trainer: {max_steps: 3}\nmodel: {lr: 1.0e-6}\ndata: {prompts_per_step: 4}\n"
        "rollout:\n  seed: 7\n  max_refill_rounds: 2\n"
        "  engine: {class_path: lite_ppo.rollout.HFEngine, init_args: {batch_size: 3}}\n"
        "  prompt: {style: plain, instruction: 'Box it.'}\n  reward: {timeout_seconds: 2}\n"
        "  eval_sampling: {n: 2, temperature: 0.5, max_new_tokens: 9}\n"
    )
    model = tmp_path / "model.yaml"
    model.write_text(
        "rollout:\n  engine: {init_args: {batch_size: 5}}\n  reward: {require_boxed: true}\n"
        "  eval_sampling: {max_new_tokens: 11}\n"
    )
    configs = ["--config", str(recipe), "--config", str(model)]
    args = build_parser().parse_args(["--model", "m", "--out", str(tmp_path), *configs])
    producer, sampling = rollout_from_args(args)
    assert isinstance(producer.engine, HFEngine) and producer.engine.batch_size == 5
    assert (producer.prompt.style, producer.prompt.instruction) == ("plain", "Box it.")
    assert (producer.reward.require_boxed, producer.reward.timeout_seconds) == (True, 2.0)
    assert (sampling.n, sampling.temperature, sampling.max_new_tokens, sampling.greedy) == (2, 0.5, 11, False)


def test_evaluate_config_typo_is_one_line(tmp_path, capsys):
    """A misspelt key of the ``rollout:`` section fails in one line naming it (as it does for fit),
    instead of being ignored."""
    from lite_ppo.cli import main as cli_main

    typo = tmp_path / "typo.yaml"
    typo.write_text("rollout:\n  eval_samplin: {n: 4}\n")
    with pytest.raises(SystemExit) as exit_info:
        out = str(tmp_path / "o")
        cli_main(["evaluate", "--model", "/nonexistent", "--benchmarks", "gsm8k", "--out", out, "--config", str(typo)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rollout.eval_samplin" in err and str(typo) in err


# The full check is the first 50 problems; 50 x 256 greedy tokens took about 8 minutes on a shared
# 2-core machine (vLLM, load ~6), so the default is 20. LITE_PPO_GSM8K_CHECK_PROBLEMS=50 runs all 50.
GSM8K_CHECK_PROBLEMS = int(os.environ.get("LITE_PPO_GSM8K_CHECK_PROBLEMS", "20"))


@pytest.mark.extended
@pytest.mark.slow
def test_smollm2_gsm8k_accuracy_matches_direct_math_verify(tmp_path, shared_data):
    """SmolLM2-135M-Instruct, the first GSM8K test problems, greedy, 256 new tokens: the command's
    accuracy equals a separate check that calls math-verify directly on the saved responses."""
    n = GSM8K_CHECK_PROBLEMS
    try:
        import vllm  # noqa: F401

        engine = "vllm"
    except ImportError:
        engine = "hf"
    from lite_ppo.models import resolve_model

    model = resolve_model("builtin:smollm2-135m-instruct")
    out = tmp_path / "out"
    _evaluate(
        "--model",
        model,
        "--benchmarks",
        "gsm8k",
        "--data-dir",
        str(shared_data / "eval"),
        "--out",
        str(out),
        "--limit",
        str(n),
        "--max-new-tokens",
        "256",
        "--engine",
        engine,
    )
    metrics, records, _ = _read(out)
    assert len(records) == n

    # The independent check: gold answers from the data file, math-verify's own defaults.
    from math_verify import parse, verify

    gold = {
        json.loads(line)["id"]: json.loads(line)["answer"]
        for line in (shared_data / "eval/gsm8k_test.jsonl").read_text().splitlines()[:n]
    }
    verdicts = {r["id"]: bool(verify(parse("$" + gold[r["id"]] + "$"), parse(r["response"]))) for r in records}
    assert set(verdicts) == set(gold)
    direct_accuracy = sum(verdicts.values()) / len(verdicts)
    assert metrics["benchmarks"]["gsm8k"]["accuracy"] == pytest.approx(direct_accuracy)
    disagree = [r["id"] for r in records if r["correct"] != verdicts[r["id"]]]
    assert not disagree, f"the command and direct math-verify disagree on {disagree}"


def test_evaluate_a_builtin_with_its_own_response_limit():
    """Without a config or flag, builtin:tiny-arith (whose working is ~25 tokens) generates at most
    32 tokens, not the general 1,024; the flag and a config's limits still win."""
    from lite_ppo.evaluation.command import DEFAULT_MAX_NEW_TOKENS, build_parser, sampling_from_args
    from lite_ppo.rollout import SamplingConfig

    def limit(*argv: str, **config) -> int:
        args = build_parser().parse_args(["--out", "unused", *argv])
        return sampling_from_args(args, **config).max_new_tokens

    assert DEFAULT_MAX_NEW_TOKENS == 1024
    assert limit("--model", "builtin:tiny-arith") == 32
    assert limit("--model", "/models/Qwen3-4B-Base") == 1024
    assert limit("--model", "builtin:tiny-arith", "--max-new-tokens", "7") == 7
    assert limit("--model", "builtin:tiny-arith", sampling=SamplingConfig(max_new_tokens=48)) == 48


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["evaluate", "--model", "missing.ckpt", "--out", "o"], "--model missing.ckpt: no such file or folder"),
        (["export-hf", "missing.ckpt", "OUT"], "checkpoint missing.ckpt: no such file or folder"),
        (
            ["evaluate", "--model", "builtin:tiny", "--benchmarks", "mth500", "--out", "o"],
            "unknown benchmark 'mth500' (did you mean 'math500'?)",
        ),
        (["evaluate", "--model", "builtin:tiny", "--out", "o", "--limit", "abc"], "argument --limit: invalid int"),
        (["compare"], "the following arguments are required"),
    ],
)
def test_the_commands_bad_input_is_one_line(tmp_path, monkeypatch, capsys, argv, expected):
    from lite_ppo.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"lite-ppo {argv[0]}: error: ") and expected in err[0], err


def test_evaluate_scores_a_testbed_model_on_the_held_out_split_its_run_evaluates(tmp_path):
    """`--benchmarks testbed` = the held-out problems a testbed run holds out (heldout_seed 0): the same
    ids and, greedy, the same verdicts as the run's own validation writes to heldout/step_0.json."""
    import subprocess
    import sys

    val_size = 16
    configs = ["--config", str(REPO / "configs/models/testbed_base.yaml")]
    recipe = ["--config", str(REPO / "configs/recipes/lite_ppo.yaml")]
    validate = [
        sys.executable,
        "-m",
        "lite_ppo.cli",
        "validate",
        *recipe,
        *configs,
        f"--data.val_size={val_size}",
        "--data.seed=5",
        "--limit",
        "1",
    ]
    validate += ["--trainer.logger.init_args.save_dir", str(tmp_path / "run")]
    done = subprocess.run(validate, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (held_file,) = (tmp_path / "run").rglob("heldout/step_0.json")
    run_verdicts = {p["id"]: p["correct"] for p in json.loads(held_file.read_text())["problems"]}
    assert len(run_verdicts) == 3 * val_size

    _evaluate("--model", "builtin:testbed-base", *configs, "--benchmarks", "testbed", "--limit", str(val_size),
              "--out", str(tmp_path / "o"))  # fmt: skip
    metrics, records, _ = _read(tmp_path / "o")
    assert {r["benchmark"] for r in records} == {"testbed-easy", "testbed-medium", "testbed-hard"}
    assert {r["id"]: r["correct"] for r in records} == run_verdicts
    hard = [r["correct"] for r in records if r["benchmark"] == "testbed-hard"]
    assert metrics["benchmarks"]["testbed-hard"]["accuracy"] == pytest.approx(sum(hard) / len(hard))
    assert metrics["averaged"] == [] and metrics["average"] == {}  # generated tiers stay out of the paper's average


@pytest.mark.parametrize(
    ("benchmarks", "expected"),
    [
        ("testbed:huge", "unknown testbed tier 'huge'; use one of testbed:easy, testbed:medium, testbed:hard"),
        ("synthetic:hardd", "unknown synthetic tier 'hardd' (did you mean synthetic:hard?)"),
        ("synthetic:hard,math5000", "unknown benchmark 'math5000' (did you mean 'math500'?)"),
    ],
)
def test_a_bad_generated_benchmark_is_one_line(tmp_path, monkeypatch, capsys, benchmarks, expected):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", "builtin:testbed-base", "--benchmarks", benchmarks, "--out", "o"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--n", "2", "--temperature", "1.0", "--pass-k", "8"], ["--pass-k 8:", "k <= n", "n is 2", "(--n)"]),
        (["--pass-k", "2"], ["--pass-k 2:", "n is 1", "(the default)"]),  # greedy: one response per problem
        (["--n", "4", "--temperature", "1.0", "--pass-k", "2", "0"], ["--pass-k 0:", "1 <= k"]),
    ],
)
def test_pass_k_above_n_is_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys, flags, expected):
    """pass@k draws k of a problem's n responses: a k outside 1..n is refused at once (exit 2, one line),
    not after the model loaded and generated, and nothing is written."""
    import lite_ppo.evaluation.runner as runner

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(runner, "load_policy_module", no_model)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", "builtin:tiny", "--benchmarks", "gsm8k", "--out", "o", *flags])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lite-ppo evaluate: error: "), err
    assert all(part in err[0] for part in expected), err
    assert not (tmp_path / "o").exists()


def _damaged_checkpoints(folder: Path) -> dict[str, Path]:
    """Files that are not a readable checkpoint of lite-ppo fit, each named by what is wrong with it."""
    import hashlib

    whole = folder / "whole.ckpt"
    torch.save({"hyper_parameters": {"model_path": "builtin:tiny"}, "state_dict": {"policy.w": torch.zeros(64)}}, whole)
    data = whole.read_bytes()
    cut = folder / "truncated.ckpt"
    cut.write_bytes(data[: len(data) // 2])
    cut_checked = folder / "truncated-with-checksum.ckpt"
    cut_checked.write_bytes(data[: len(data) // 2])
    # The checksum of the whole file, as VerifiedCheckpointIO wrote it before the file was cut.
    (folder / "truncated-with-checksum.ckpt.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  x.ckpt\n")
    text = folder / "notes.ckpt"
    text.write_text("not a checkpoint\n")
    foreign = folder / "foreign.ckpt"  # a torch file, but not a training checkpoint
    torch.save({"weights": torch.zeros(3)}, foreign)
    tensor = folder / "tensor.ckpt"
    torch.save(torch.zeros(3), tensor)
    whole.unlink()
    return {"truncated": cut, "checksum": cut_checked, "text": text, "foreign": foreign, "tensor": tensor}


@pytest.mark.parametrize("command", ["evaluate", "export-hf"])
def test_a_damaged_or_foreign_checkpoint_is_one_line(tmp_path, monkeypatch, capsys, command):
    """A truncated checkpoint (with or without its .sha256) or a file that is no checkpoint: one line naming
    the file, exit 2, no torch traceback (PytorchStreamReader, UnpicklingError), as `fit --ckpt_path`."""
    monkeypatch.chdir(tmp_path)
    files = _damaged_checkpoints(tmp_path)
    what = {
        "truncated": "truncated",
        "checksum": "SHA-256",
        "text": "not a torch checkpoint",
        "foreign": "policy",
        "tensor": "holds a Tensor",
    }
    for kind, path in files.items():
        argv = ["evaluate", "--model", str(path), "--benchmarks", "gsm8k", "--limit", "1", "--out", "o"]
        if command == "export-hf":
            argv = ["export-hf", str(path), "exported"]
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2, kind
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"lite-ppo {command}: error: checkpoint {path}"), (kind, err)
        assert what[kind] in err[0], (kind, err)
    assert not (tmp_path / "o").exists() and not (tmp_path / "exported").exists()
