"""The ``lite-ppo`` command surface: one help listing every command, every LightningCLI subcommand
doing what it promises with a shipped recipe and the tiny model, and user errors as one line with
exit status 2 (the traceback only with ``--debug`` / ``LITE_PPO_DEBUG=1``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO
from lite_ppo.cli import main

RECIPE = str(REPO / "configs/recipes/lite_ppo.yaml")
TINY = str(REPO / "configs/models/tiny.yaml")
EVERY_COMMAND = [
    "fit",
    "validate",
    "test",
    "evaluate",
    "prepare-model",
    "export-hf",
    "data",
    "compare",
    "sweep",
    "advise",
]


def _recipe_args(tmp: Path, *extra: str) -> list[str]:
    return [
        "--config",
        RECIPE,
        "--config",
        TINY,
        "--trainer.default_root_dir",
        str(tmp),
        "--trainer.logger.init_args.save_dir",
        str(tmp / "tb"),
        *extra,
    ]


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``lite-ppo ARGV`` in a fresh interpreter (the exit status and stderr of the real process)."""
    code = "import sys; from lite_ppo.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def _user_error(capsys, argv: list[str]) -> str:
    """Run in-process, expect exit status 2, return the one stderr line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    assert "Traceback" not in "\n".join(err)
    return err[-1]


# ------------------------------------------------------------------ one help
def test_help_lists_every_command_one_line_each(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out.splitlines()
    for name in EVERY_COMMAND:
        rows = [line for line in out if line.split()[:1] == [name]]
        assert len(rows) == 1, f"{name}: {rows}"
        assert len(rows[0].split()) > 3, f"{name} has no summary: {rows[0]!r}"
    # predict is not offered, so it is not listed
    assert not [line for line in out if line.split()[:1] == ["predict"]]


def test_help_and_project_command_help_do_not_import_lightning() -> None:
    """``lite-ppo --help`` and ``lite-ppo evaluate|prepare-model|export-hf --help`` (through the installed
    console script's function) run without importing torch, Lightning or transformers."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="lite-ppo")
    code = (
        "import sys, importlib\n"
        f"main = getattr(importlib.import_module({script.module!r}), {script.attr!r})\n"
        "for argv in (['--help'], ['evaluate', '--help'], ['prepare-model', '--help'], ['export-hf', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "print(sorted(m for m in ('torch', 'lightning', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    from lite_ppo.checkpoints.export import DTYPE_NAMES
    from lite_ppo.models.loading import DTYPES

    assert DTYPE_NAMES == tuple(DTYPES)  # export-hf's --dtype choices, spelled without torch


# ------------------------------------------------------------------ removed / unknown commands
def test_predict_is_removed_with_one_line_saying_what_to_use(capsys) -> None:
    line = _user_error(capsys, ["predict", "--config", RECIPE])
    assert line.startswith("lite-ppo predict: error:")
    assert "lite-ppo evaluate" in line and "responses.jsonl" in line


def test_unknown_command_names_the_commands(capsys) -> None:
    line = _user_error(capsys, ["trian"])
    assert "'trian'" in line and "fit" in line and "evaluate" in line


# ------------------------------------------------------------------ bad options: one line, exit 2
@pytest.mark.parametrize(
    ("extra", "named", "allowed"),
    [
        (["--model.lr", "abc"], "model.lr", "float"),
        (["--model.lr", "-1e-4"], "expected one argument", "write --model.lr=-1e-4"),
        (
            ["--trainer.callbacks+=lite_ppo.callbacks.NoSuchThing"],
            "class_path 'lite_ppo.callbacks.NoSuchThing'",
            "has no attribute 'NoSuchThing'",  # the reason, not only "Problem with given class_path"
        ),
        (["--config", "missing.yaml"], "missing.yaml", "does not exist"),
        (["--trainer.max_epochs", "x"], "trainer.max_epochs", "int or null"),
        (["--optimizer", "torch.optim.SGD"], "--optimizer", "model.lr"),
        (["--lr_scheduler=torch.optim.lr_scheduler.StepLR"], "--lr_scheduler", "model.lr_schedule"),
        (["--data.prompts_per_step", "0"], "data.prompts_per_step", ">= 1"),
        # a constructor's own check names the option, not its class (SamplingConfig serves two options)
        (["--rollout.sampling.top_p", "2"], "rollout.sampling.top_p must", "(0, 1]"),
        (["--rollout.eval_sampling.top_p", "2"], "rollout.eval_sampling.top_p must", "(0, 1]"),
        (
            ["--trainer.callbacks+=lite_ppo.callbacks.ClipHigher", "--trainer.callbacks.eps_low=1.5"],
            "ClipHigher.eps_low",
            "[0, 1)",
        ),
    ],
)
def test_bad_option_is_one_line_exit_2(capsys, tmp_path, extra, named, allowed) -> None:
    line = _user_error(capsys, ["fit", *_recipe_args(tmp_path, *extra)])
    assert line.startswith("lite-ppo fit: error:"), line
    assert named in line and allowed in line, line


def test_debug_shows_the_exception(tmp_path) -> None:
    with pytest.raises(argparse.ArgumentError, match="model.lr"):
        main(["fit", *_recipe_args(tmp_path, "--model.lr", "abc"), "--debug"])


def test_debug_environment_variable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LITE_PPO_DEBUG", "1")
    with pytest.raises(argparse.ArgumentError, match="model.lr"):
        main(["fit", *_recipe_args(tmp_path, "--model.lr", "abc")])


@pytest.mark.slow
def test_bad_value_in_a_real_process_exits_2_without_traceback(tmp_path) -> None:
    done = _run(["fit", *_recipe_args(tmp_path, "--model.lr", "abc")])
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("lite-ppo fit: error: model.lr: expected float, got 'abc'")
    debug = _run(["fit", *_recipe_args(tmp_path, "--model.lr", "abc"), "--debug"])
    assert debug.returncode != 0 and "Traceback" in debug.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--model.model_path", "/nonexistent/model"], "/nonexistent/model"),
        (
            ["--data.sources", "{easy: /nonexistent/easy.jsonl}", "--data.weights", "{easy: 1.0}"],
            "data.sources['easy']",
        ),
    ],
)
def test_missing_path_is_one_line_exit_2(capsys, tmp_path, extra, named) -> None:
    line = _user_error(capsys, ["fit", *_recipe_args(tmp_path, "--data.steps_per_epoch", "1", *extra)])
    assert line.startswith("lite-ppo fit: error:") and named in line, line


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["zero3.yaml", "zero3_offload.yaml"])
def test_a_gpu_strategy_on_a_machine_without_one_points_to_the_cpu_test_strategy(capsys, tmp_path, strategy) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the GPU strategy runs")
    config = str(REPO / "configs/strategies" / strategy)
    line = _user_error(capsys, ["fit", *_recipe_args(tmp_path, "--config", config)])
    assert line.startswith("lite-ppo fit: error:"), line
    assert "CUDA" in line and "configs/strategies/zero3_cpu_test.yaml" in line and "docs/scaling.md" in line, line
    assert not list(tmp_path.rglob("seed*")), "the run folder of a run that never started is left behind"


# ------------------------------------------------------------------ every subcommand with a shipped recipe
@pytest.fixture(scope="module")
def fitted(tmp_path_factory, tiny_model_path) -> tuple[Path, Path, str]:
    """One rollout step of the shipped Lite PPO recipe on the tiny model: (folder, last.ckpt, stdout)."""
    tmp = tmp_path_factory.mktemp("fit")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fit", *_recipe_args(tmp, "--data.steps_per_epoch", "1")]) is None
    ckpts = sorted(tmp.rglob("last.ckpt"))
    assert ckpts, f"no last.ckpt under {tmp}"
    return tmp, ckpts[0], out.getvalue()


@pytest.mark.slow
def test_fit_reports_the_held_out_tiers_of_the_recipe(fitted) -> None:
    """The recipe holds out problems (data.val_size) and fit reports their accuracy at the end of the epoch."""
    tmp, _, out = fitted
    assert "Held-out tiers" in out
    table = out[out.index("Held-out tiers") :].splitlines()  # title, header, dashes, one row per tier
    rows = {line.split()[0]: line.split() for line in table[3:6]}
    assert {tier: row[1] for tier, row in rows.items()} == {
        "easy": "32",
        "medium": "32",
        "hard": "32",
    }  # problems: the recipe's val_size
    assert list(tmp.rglob("events.out.tfevents.*"))


def _mini_benchmark(tmp: Path) -> Path:
    path = tmp / "mini.jsonl"
    rows = [
        {"id": "m1", "problem": "What is 1 + 1?", "answer": "2", "source": "mini"},
        {"id": "m2", "problem": "What is 2 + 3?", "answer": "5", "source": "mini"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_validate_prints_held_out_tiers_and_the_present_benchmarks(capsys, tmp_path, monkeypatch, fitted) -> None:
    """With a shipped recipe, no Evaluation callback and a fit's checkpoint, validate evaluates the
    held-out tiers and the default benchmarks whose files exist (here: one of two, cut by --limit),
    naming the missing one."""
    import lite_ppo.cli.lightning_cli as cli
    from lite_ppo.evaluation.benchmarks import BenchmarkSpec

    mini = _mini_benchmark(tmp_path)
    specs = [BenchmarkSpec("mini", str(mini)), BenchmarkSpec("absent", str(tmp_path / "absent.jsonl"))]
    monkeypatch.setattr(cli, "default_benchmark_specs", lambda: (specs, None), raising=False)
    main(["validate", *_recipe_args(tmp_path), "--ckpt_path", str(fitted[1]), "--limit", "1"])
    out = capsys.readouterr().out
    assert "not found: absent" in out
    benchmark_table = out[out.index("Evaluation (") :].splitlines()
    assert benchmark_table[3].split()[:2] == ["mini", "1"]  # --limit 1 of its 2 problems
    # The logs of a validation of a run's checkpoint go into that run's validate/ folder.
    assert list((fitted[1].parent.parent / "validate").glob("events.out.tfevents.*"))
    tiers = out[out.index("Held-out tiers") :].splitlines()
    assert {line.split()[0]: line.split()[1] for line in tiers[3:6]} == {"easy": "32", "medium": "32", "hard": "32"}


@pytest.mark.slow
def test_validate_of_a_checkpoint_heads_its_step_fetches_nothing_and_warns_nothing(
    capsys, tmp_path, monkeypatch, recwarn, fitted
) -> None:
    """validate --ckpt_path: the tables are headed with the checkpoint's global step (not 0); a default
    benchmark that is not on this machine (aime24: fetched from the Hub on first use) is named as not
    found and never fetched, online or not; Lightning's "dirpath has changed" warning is not shown."""
    import torch

    import lite_ppo.cli.lightning_cli as cli
    from lite_ppo.data import registry
    from lite_ppo.evaluation.benchmarks import DEFAULT_BENCHMARKS, BenchmarkSpec

    if registry.status("aime24") != "missing":
        pytest.skip("aime24 is in this machine's data cache")
    fetched: list[str] = []

    def fetch(name, *args, **kwargs):
        fetched.append(name)
        raise OSError("no network in this test")

    monkeypatch.setattr(registry, "fetch", fetch)
    monkeypatch.setattr(registry, "_fetch_failure", None)  # an earlier test's failed fetch must not hide a new one
    for variable in (*registry.OFFLINE_VARIABLES, "LITE_PPO_EVAL_DIR"):
        monkeypatch.delenv(variable, raising=False)
    aime24 = next(spec for spec in DEFAULT_BENCHMARKS if spec.name == "aime24")
    specs = [BenchmarkSpec("mini", str(_mini_benchmark(tmp_path))), aime24]
    monkeypatch.setattr(cli, "default_benchmark_specs", lambda: (specs, None), raising=False)
    ckpt = fitted[1]
    step = torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"]
    assert step > 0

    main(["validate", *_recipe_args(tmp_path), "--ckpt_path", str(ckpt), "--limit", "1"])
    out, err = capsys.readouterr()
    assert fetched == []
    assert "not found: aime24" in out
    assert f"Evaluation (global step {step})" in out and f"Held-out tiers (global step {step})" in out
    assert "global step 0" not in out
    assert not [w for w in recwarn if "dirpath has changed" in str(w.message)]
    assert "dirpath has changed" not in err


@pytest.mark.slow
def test_validate_without_anything_to_evaluate_says_so(capsys, tmp_path, monkeypatch) -> None:
    import lite_ppo.cli.lightning_cli as cli

    monkeypatch.setattr(cli, "default_benchmark_specs", lambda: ([], None), raising=False)
    line = _user_error(capsys, ["validate", *_recipe_args(tmp_path, "--data.val_size", "0")])
    assert "data.val_size" in line and "LITE_PPO_EVAL_DIR" in line


@pytest.mark.slow
def test_test_evaluates_the_benchmarks_of_a_checkpoint_and_writes_the_report(capsys, tmp_path, fitted) -> None:
    """``test --ckpt_path`` runs the benchmark evaluation of ``lite-ppo evaluate`` on the checkpoint's
    policy: the table on stdout and metrics.json / responses.jsonl with one response per problem, in
    the test folder of the run that wrote the checkpoint (``<run>/checkpoints/last.ckpt``)."""
    _, ckpt, _ = fitted
    mini = _mini_benchmark(tmp_path)
    main(
        [
            "test",
            *_recipe_args(tmp_path),
            "--trainer.callbacks+=lite_ppo.callbacks.Evaluation",
            f"--trainer.callbacks.benchmarks=[{{name: mini, file: {mini}}}]",
            "--ckpt_path",
            str(ckpt),
        ]
    )
    out = capsys.readouterr().out
    assert "mini" in out and "wrote " in out
    metrics = ckpt.parent.parent / "test" / "metrics.json"
    assert (ckpt.parent.parent / "run.json").is_file() and metrics.is_file()
    assert not list(tmp_path.rglob("metrics.json"))  # nothing under the test's own save_dir
    payload = json.loads(metrics.read_text())
    assert payload["model"] == str(ckpt)
    assert payload["benchmarks"]["mini"]["num_problems"] == 2
    responses = (metrics.parent / "responses.jsonl").read_text().splitlines()
    assert sorted(json.loads(r)["id"] for r in responses) == ["m1", "m2"]


def test_output_into_a_closed_pipe_ends_quietly():
    """`lite-ppo --help | head -0`: the reader is gone before the first write; no traceback."""
    code = "import sys; from lite_ppo.cli.commands import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    proc.stdout.close()  # before the child has written anything (it takes ~50 ms to start)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_fit_help_describes_every_option_under_whole_sentence_headers() -> None:
    """``lite-ppo fit --help`` takes each section's header from its class docstring's first line and
    each option's text from its ``Args:`` entry (jsonargparse, through docstring_parser): every
    section of the fit parser has a first line that is a whole sentence and every argument an entry."""
    import inspect

    import docstring_parser

    from lite_ppo.callbacks import Diagnostics, Rollout
    from lite_ppo.callbacks.console import ConsoleProgressBar
    from lite_ppo.data.datamodule import MathDataModule
    from lite_ppo.reliability import CheckpointIntegrity, DivergenceGuard, Preemption
    from lite_ppo.research.run_record import RunRecord
    from lite_ppo.training.module import LitePPO

    sections = [LitePPO, MathDataModule, Rollout, Diagnostics, ConsoleProgressBar]
    sections += [Preemption, CheckpointIntegrity, DivergenceGuard, RunRecord]  # LitePPOCLI.add_arguments_to_parser
    for cls in sections:
        doc = docstring_parser.parse(cls.__doc__)
        assert doc.short_description.endswith("."), (cls.__name__, doc.short_description)
        described = {p.arg_name for p in doc.params if p.description}
        arguments = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "args", "kwargs")]
        assert [n for n in arguments if n not in described] == [], cls.__name__


# ------------------------------------------------------------------ evaluate / export-hf: bad files, one line
def _bad_files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "bad.yaml").write_text("rollout:\n  sampling: [\n    - {n: 2\n", encoding="utf-8")
    (tmp_path / "latin1.yaml").write_bytes("rollout:\n  prompt: caf\xe9\n".encode("latin-1"))
    (tmp_path / "not_a_checkpoint").mkdir()
    return {name: tmp_path / name for name in ("bad.yaml", "latin1.yaml", "not_a_checkpoint", "missing.yaml")}


@pytest.mark.parametrize(
    ("argv", "named", "allowed"),
    [
        (["evaluate", "--model", "builtin:tiny", "--config", "{bad_yaml}"], "bad.yaml", "cannot read it as YAML"),
        (["evaluate", "--model", "builtin:tiny", "--config", "{latin1_yaml}"], "latin1.yaml", "not UTF-8"),
        (["evaluate", "--model", "builtin:tiny", "--benchmarks", "{missing_yaml}"], "missing.yaml", "does not exist"),
        (["evaluate", "--model", "builtin:tiny", "--n", "0"], "--n must be", ">= 1"),
        (["evaluate", "--model", "builtin:tiny", "--top-p", "2", "--temperature", "1"], "--top-p must", "(0, 1]"),
        (["export-hf", "{not_a_checkpoint}", "{out}"], "not_a_checkpoint", "neither a DeepSpeed checkpoint"),
    ],
)
def test_a_bad_file_or_value_for_evaluate_or_export_is_one_line(capsys, tmp_path, argv, named, allowed) -> None:
    files = {**_bad_files(tmp_path), "out": tmp_path / "out"}
    argv = [a.format(**{k.replace(".", "_"): v for k, v in files.items()}) if "{" in a else a for a in argv]
    argv = [*argv, "--out", str(tmp_path / "eval")] if argv[0] == "evaluate" else argv
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    (line,) = lines
    assert line.startswith(f"lite-ppo {argv[0]}: error:") and named in line and allowed in line, line
