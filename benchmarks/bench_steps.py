"""Seconds per training step, split by phase, with the tokens the update computes, its padding
efficiency, its achieved GFLOP/s against a matmul probe run in the same process, and peak memory.

    python benchmarks/bench_steps.py                                    # quickstart workload, 4 steps
    python benchmarks/bench_steps.py --workload longtail                # medium tier, 512 new tokens, 2 prompts x 4
    python benchmarks/bench_steps.py --label mb4 --set model.micro_batch_size=4   # a config override
    python benchmarks/bench_steps.py --label default                    # printed beside "mb4"
    python benchmarks/bench_steps.py --workload quickstart --report-only   # the table from the JSON file

Workloads (``--config`` replaces their config files, ``--prompts``/``--samples``/``--max-new-tokens``
their sizes; ``--set KEY=VALUE`` and any further ``--section.key=value`` go to ``lite-ppo fit``):

- ``quickstart``: ``configs/quickstart.yaml`` as ``make train`` runs it (SmolLM2-135M-Instruct fp32,
  vLLM, 4 prompts x 8 samples, 48 new tokens, 2 optimizer steps per rollout batch);
- ``longtail``: the same with the ``medium`` synthetic tier and ``max_new_tokens`` 512, so response
  lengths spread from a few tokens to the limit (2 prompts x 4 samples by default, to stay
  affordable on 2 cores);
- ``testbed``: Lite PPO on the testbed's base-like init (``configs/models/testbed_base.yaml``);
- ``transfer``: the real-LM tier (``configs/models/smollm2_transfer.yaml``, docs/transfer.md) on its
  ``synthetic:medium`` candidate, ``BatchedEngine``; add ``--config configs/engines/vllm_cpu.yaml`` (with the
  three configs) for the same step through vLLM.

Each invocation runs ``lite-ppo fit`` for ``--steps`` steps in this process (no validation; the
checkpoints the config asks for land in a temporary folder), reads the TensorBoard scalars back
(``time/*``, ``memory/peak_rss_gib``; ``lite_ppo.research.scalars``), counts the tokens every policy
forward computes (``step_meter.StepMeter``) and runs a 2048 x 2048 fp32 matmul probe before and
after the fit on the same thread count. It prints one row per step, then a table of the median of
the steady-state steps (after ``--warmup``) of every run stored under each ``--label`` of the
workload, side by side, with the ratio to the first label; and it adds the run to ``--json``
(default ``runs/bench_steps.json``). Runs with the same label and the same settings accumulate (run
the labels interleaved for a fair series); a label run with other settings replaces its old runs
(settings: the configs, the overrides, the step count, and whether the fit keeps freed memory,
``lite_ppo.cli.allocator``: ``LITE_PPO_RETAIN_FREED_MEMORY=0`` runs it without).

Training GFLOP/s = 6 x P x T / t_update, where P is the policy's parameter count (tied embeddings
once), T the non-padding token positions of the forward passes with gradient in the step (each
response passes once per PPO epoch; prompts count once per forward that computes them) and t_update
``time/update_s``. 6 = 2 (multiply-add) x 3 (forward + backward for activations and weights); the
attention score matmuls are not counted and the embedding lookup is, the convention of docs/benchmarks.md's
figures. Probe GFLOP/s = 2 n^3 / t per matmul, the best of the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # step_meter, for the CLI's class_path too

import step_meter  # noqa: E402
import torch  # noqa: E402

from lite_ppo import metric_names as names  # noqa: E402
from lite_ppo.cli import main  # noqa: E402
from lite_ppo.cli.allocator import retention_enabled  # noqa: E402
from lite_ppo.research.scalars import read_scalars  # noqa: E402

# Tags documented in names.SCALARS that have no constant there (yet).
REWARD_SECONDS = getattr(names, "REWARD_SECONDS", "time/reward_s")
OLD_LOGPROBS_SECONDS = getattr(names, "OLD_LOGPROBS_SECONDS", "time/old_logprobs_s")
WEIGHT_SYNC_SECONDS = getattr(names, "WEIGHT_SYNC_SECONDS", "time/weight_sync_s")
# The module's own padding efficiency, when it logs one (token-budget micro-batching).
PADDING_EFFICIENCY = getattr(names, "PADDING_EFFICIENCY", None) or next(
    (tag for tag in {**names.SCALARS, **names.CONDITIONAL_SCALARS} if tag.endswith("/padding_efficiency")), None
)

PHASE_TAGS = {  # field -> tag; a phase the run does not have (weight sync with the HF engine) stays 0
    "generation_s": names.GENERATION_SECONDS,
    "scoring_s": REWARD_SECONDS,
    "weight_sync_s": WEIGHT_SYNC_SECONDS,
    "old_logprobs_s": OLD_LOGPROBS_SECONDS,
    "update_s": names.UPDATE_SECONDS,
    "step_s": names.STEP_SECONDS,
}


@dataclass(frozen=True)
class Workload:
    description: str
    configs: list[str]
    overrides: list[str] = field(default_factory=list)
    prompts: int | None = None  # None: the config's
    samples: int | None = None
    max_new_tokens: int | None = None


WORKLOADS = {
    "quickstart": Workload("the main job's step: 4 prompts x 8 samples, 48 new tokens", ["configs/quickstart.yaml"]),
    "longtail": Workload(
        "long-tail response lengths: medium tier, max_new_tokens 512",
        ["configs/quickstart.yaml"],
        ['--data.sources={"medium": "synthetic:medium"}', '--data.weights={"medium": 1.0}'],
        prompts=2,
        samples=4,
        max_new_tokens=512,
    ),
    "testbed": Workload(
        "the testbed's step: Lite PPO on testbed-base, 32 prompts x 8 samples, 80 new tokens",
        ["configs/recipes/lite_ppo.yaml", "configs/models/testbed_base.yaml"],
    ),
    "transfer": Workload(
        "the real-LM tier's step (docs/transfer.md): Lite PPO on SmolLM2-135M, medium tier, 4 x 8, 96 new tokens",
        [
            "configs/recipes/lite_ppo.yaml",
            "configs/models/smollm2_transfer.yaml",
            "configs/data/transfer_synthetic_medium.yaml",
        ],
    ),
}

# (field, row title, format, compare): the summary table's rows, in order. compare: print the ratio to the first label.
ROWS = [
    ("step_s", "step total s", "{:.2f}", True),
    ("generation_s", "  generation s", "{:.2f}", True),
    ("scoring_s", "  scoring s", "{:.3f}", True),
    ("weight_sync_s", "  weight sync s", "{:.2f}", True),
    ("old_logprobs_s", "  old log-probs s", "{:.2f}", True),
    ("update_s", "  training update s", "{:.2f}", True),
    ("other_s", "  other s (step - phases)", "{:.2f}", True),
    ("responses", "responses per step", "{:.0f}", False),
    ("response_length_mean", "response length mean", "{:.1f}", False),
    ("response_length_spread", "response length min / median / max", "{}", False),
    ("generation_tokens_per_s", "generated tokens / s", "{:.1f}", True),
    ("rollout_tokens", "rollout tokens (prompt + response per response)", "{:.0f}", False),
    ("work_floor_tokens", "  of which unique (prompt once per group)", "{:.0f}", False),
    ("update_tokens_processed", "update tokens processed (with padding)", "{:.0f}", True),
    ("update_tokens_real", "update tokens real (no padding)", "{:.0f}", True),
    ("padding_efficiency", "padding efficiency (update, real / processed)", "{:.3f}", False),
    ("padding_efficiency_logged", "padding efficiency logged by the module", "{:.3f}", False),
    ("old_logprobs_tokens_processed", "old log-prob tokens processed", "{:.0f}", True),
    ("old_logprobs_padding_efficiency", "padding efficiency (old log-probs)", "{:.3f}", False),
    ("update_forwards", "update forward passes", "{:.0f}", False),
    ("update_gflops", "training GFLOP/s (6 P T_real / t_update)", "{:.1f}", True),
    ("probe_gflops", "matmul probe GFLOP/s (best, same process)", "{:.1f}", False),
    ("update_probe_fraction", "training / probe", "{:.2f}", False),
    ("old_logprobs_gflops", "old log-probs GFLOP/s (2 P T_real / t)", "{:.1f}", True),
    ("peak_rss_gib", "peak RSS GiB (max over runs)", "{:.2f}", True),
]


# -- the matmul probe ------------------------------------------------------------------------------
def matmul_probe(n: int = 2048, seconds: float = 2.0) -> dict[str, Any]:
    """fp32 n x n matmul rate on this process's torch threads: best and median over >= 3 repeats."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)  # warm-up: first-touch pages, BLAS thread pool
    rates = []
    deadline = time.perf_counter() + seconds
    while len(rates) < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        rates.append(2 * n**3 / (time.perf_counter() - start) / 1e9)
    return {
        "n": n,
        "threads": torch.get_num_threads(),
        "repeats": len(rates),
        "gflops_best": max(rates),
        "gflops_median": statistics.median(rates),
    }


# -- one run ---------------------------------------------------------------------------------------
def fit_arguments(configs: list[str], steps: int, root: str, overrides: list[str]) -> list[str]:
    args = ["fit"]
    for config in configs:
        args += ["--config", config]
    return args + [
        f"--trainer.default_root_dir={root}",
        f"--trainer.logger.init_args.save_dir={root}",
        "--trainer.max_steps=-1",
        f"--trainer.limit_train_batches={steps}",
        "--trainer.max_epochs=1",
        "--trainer.limit_val_batches=0",
        "--trainer.num_sanity_val_steps=0",
        f"--data.steps_per_epoch={steps}",
        "--trainer.callbacks+=step_meter.StepMeter",
        *overrides,
    ]


def run_once(
    configs: list[str], overrides: list[str], steps: int, probe_size: int, probe_seconds: float
) -> dict[str, Any]:
    """Fit ``steps`` steps in this process; the per-step figures, the probes and the machine's state."""
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_before = os.getloadavg()
    probe_before = matmul_probe(probe_size, probe_seconds)
    with tempfile.TemporaryDirectory(prefix="bench_steps_") as root:
        code = main(fit_arguments(configs, steps, root, overrides))
        if code:
            raise SystemExit(code)
        scalars: dict[str, Any] = {}
        for folder in sorted({path.parent for path in Path(root).rglob("*tfevents*")}):
            scalars.update(read_scalars(folder))
    probe_after = matmul_probe(probe_size, probe_seconds)
    probe = max(probe_before["gflops_best"], probe_after["gflops_best"])
    params = step_meter.MODEL_INFO.get("params", 0)
    records = list(step_meter.RECORDS)
    step_series = scalars.get(names.STEP_SECONDS)
    logged_steps = [int(s) for s in step_series.steps] if step_series is not None else []
    rows = []
    for i in range(max(len(logged_steps), len(records))):
        logged = {key: _value_at(scalars.get(tag), logged_steps, i) for key, tag in PHASE_TAGS.items()}
        logged["peak_rss_gib"] = _value_at(scalars.get(names.PEAK_RSS), logged_steps, i)
        logged["padding_efficiency_logged"] = (
            _value_at(scalars.get(PADDING_EFFICIENCY), logged_steps, i) if PADDING_EFFICIENCY else None
        )
        rows.append(derive(i, logged, records[i] if i < len(records) else {}, params, probe))
    return {
        "started": started,
        "configs": configs,
        "overrides": overrides,
        "steps": rows,
        "params": params,
        "model": dict(step_meter.MODEL_INFO),
        "probe_before": probe_before,
        "probe_after": probe_after,
        "probe_gflops": probe,
        "peak_rss_gib_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "machine": {
            "host": platform.node(),
            "cpu": _cpu_model(),
            "cpu_flags": _cpu_flags(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "freed_memory_kept": retention_enabled(),  # lite_ppo.cli.allocator (LITE_PPO_RETAIN_FREED_MEMORY)
        },
    }


def derive(
    index: int, logged: dict[str, float | None], counts: dict[str, Any], params: int, probe: float
) -> dict[str, Any]:
    """One step's row: logged seconds, counted tokens, and what follows from them."""
    row: dict[str, Any] = {"step": index}
    for key in PHASE_TAGS:
        value = logged.get(key)
        row[key] = 0.0 if value is None and key == "weight_sync_s" else value
    row["peak_rss_gib"] = logged.get("peak_rss_gib")
    row["padding_efficiency_logged"] = logged.get("padding_efficiency_logged")
    row.update(counts)
    phases = [row[k] for k in ("generation_s", "scoring_s", "weight_sync_s", "old_logprobs_s", "update_s")]
    row["other_s"] = row["step_s"] - sum(phases) if row["step_s"] is not None and None not in phases else None
    if "response_tokens" in counts:
        row["response_length_mean"] = counts["response_tokens"] / max(counts["responses"], 1)
        row["work_floor_tokens"] = counts["unique_prompt_tokens"] + counts["response_tokens"]
        row["generation_tokens_per_s"] = _ratio(counts["response_tokens"], row["generation_s"])
    row["padding_efficiency"] = _ratio(counts.get("update_tokens_real"), counts.get("update_tokens_processed"))
    row["old_logprobs_padding_efficiency"] = _ratio(
        counts.get("old_logprobs_tokens_real"), counts.get("old_logprobs_tokens_processed")
    )
    real = counts.get("update_tokens_real")
    row["update_gflops"] = _ratio(6 * params * real / 1e9, row["update_s"]) if real else None
    old_real = counts.get("old_logprobs_tokens_real")
    row["old_logprobs_gflops"] = _ratio(2 * params * old_real / 1e9, row["old_logprobs_s"]) if old_real else None
    row["probe_gflops"] = probe
    row["update_probe_fraction"] = _ratio(row["update_gflops"], probe)
    return row


def _value_at(series, logged_steps: list[int], index: int) -> float | None:
    """The tag's value at the step where the index-th training step logged ``time/step_s``."""
    if series is None or index >= len(logged_steps):
        return None
    hits = [float(v) for s, v in zip(series.steps, series.values) if int(s) == logged_steps[index]]
    return hits[-1] if hits else None


def _ratio(numerator, denominator) -> float | None:
    if numerator is None or not denominator:
        return None
    return float(numerator) / float(denominator)


def _cpu_flags() -> list[str]:
    """The matmul-relevant ISA extensions (fp32 and bf16 rates differ a lot between AVX2, AVX-512 and AMX)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return [
                    f
                    for f in line.split(":", 1)[1].split()
                    if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
                ]
    except OSError:
        pass
    return []


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# -- the stored series and the tables --------------------------------------------------------------
def store(path: Path, workload: str, label: str, signature: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    data = json.loads(path.read_text()) if path.exists() else {"version": 1, "series": {}}
    series = data["series"].setdefault(workload, {})
    entry = series.get(label)
    if entry is None or entry.get("signature") != signature:
        if entry is not None:
            print(
                f"bench_steps: label {label!r} of workload {workload!r} had other settings; "
                f"its {len(entry['runs'])} earlier run(s) are replaced"
            )
        entry = series[label] = {"signature": signature, "runs": []}
    entry["runs"].append(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return data


def summary(runs: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Median of every field over the steady-state steps of all runs; peak RSS: the largest."""
    steady = [row for run in runs for row in run["steps"][warmup:]] or [row for run in runs for row in run["steps"]]
    out: dict[str, Any] = {"steps_used": len(steady), "runs": len(runs)}
    for key, *_ in ROWS:
        values = [row.get(key) for row in steady if isinstance(row.get(key), (int, float))]
        out[key] = statistics.median(values) if values else None
    peaks = [row.get("peak_rss_gib") for run in runs for row in run["steps"] if row.get("peak_rss_gib") is not None]
    out["peak_rss_gib"] = max(peaks) if peaks else None
    spread = [
        (row["response_length_min"], row["response_length_median"], row["response_length_max"])
        for row in steady
        if "response_length_min" in row
    ]
    out["response_length_spread"] = (
        f"{min(s[0] for s in spread):.0f} / {statistics.median(s[1] for s in spread):.0f} / "
        f"{max(s[2] for s in spread):.0f}"
        if spread
        else None
    )
    return out


def print_steps(run: dict[str, Any]) -> None:
    columns = [
        ("gen", "generation_s"),
        ("score", "scoring_s"),
        ("sync", "weight_sync_s"),
        ("old lp", "old_logprobs_s"),
        ("update", "update_s"),
        ("step", "step_s"),
        ("resp len", "response_length_mean"),
        ("proc tok", "update_tokens_processed"),
        ("real tok", "update_tokens_real"),
        ("pad eff", "padding_efficiency"),
        ("GFLOP/s", "update_gflops"),
        ("RSS GiB", "peak_rss_gib"),
    ]
    print("\nstep | " + " | ".join(f"{title:>8}" for title, _ in columns))
    for row in run["steps"]:
        print(
            f"{row['step']:4d} | "
            + " | ".join(
                _cell(
                    row.get(key), "{:8.2f}" if not key.endswith("processed") and not key.endswith("real") else "{:8.0f}"
                )
                for _, key in columns
            )
        )
    before, after = run["probe_before"], run["probe_after"]
    print(
        f"matmul probe {before['n']}^2 fp32: {before['gflops_best']:.1f} GFLOP/s before the fit "
        f"({before['threads']} threads), {after['gflops_best']:.1f} after ({after['threads']} threads); "
        f"policy {run['params'] / 1e6:.1f} M parameters; "
        f"load average {run['machine']['loadavg_before'][0]:.2f} -> {run['machine']['loadavg_after'][0]:.2f}; "
        f"freed memory kept: {'yes' if run['machine'].get('freed_memory_kept') else 'no'}"
    )
    update_threads = {row.get("update_threads") for row in run["steps"]} - {None}
    if update_threads and update_threads != {after["threads"]}:
        print(
            f"warning: the update ran on {sorted(update_threads)} torch threads, the probe on "
            f"{after['threads']}: the fraction compares unlike rates"
        )


def print_table(data: dict[str, Any], workload: str, warmup: int) -> None:
    series = data["series"].get(workload, {})
    if not series:
        print(f"bench_steps: nothing stored for workload {workload!r}")
        return
    labels = list(series)
    sums = {label: summary(entry["runs"], warmup) for label, entry in series.items()}
    header = ["metric (median of steady-state steps)"] + labels + [f"{label}/{labels[0]}" for label in labels[1:]]
    width = max(len(title) for _, title, *_ in ROWS) + 2
    print(f"\n{workload}: {WORKLOADS[workload].description if workload in WORKLOADS else ''}")
    for label in labels:
        s = sums[label]
        extra = " ".join(series[label]["signature"]["overrides"]) or "(no overrides)"
        print(
            f"  {label}: {s['runs']} run(s), {s['steps_used']} steady-state steps; "
            f"{' '.join(series[label]['signature']['configs'])} {extra}"
        )
    # A long label or value ("42 / 186 / 512") widens its column, never runs into the next.
    values = [
        max(
            (len(fmt.format(sums[label][key])) for key, _, fmt, _ in ROWS if sums[label].get(key) is not None),
            default=0,
        )
        for label in labels
    ]
    columns = [max(14, len(h) + 2, v + 2) for h, v in zip(header[1:], values + [0] * len(labels[1:]))]
    print(f"{header[0]:<{width}}" + "".join(f"{h:>{w}}" for h, w in zip(header[1:], columns)))
    label_widths, ratio_widths = columns[: len(labels)], columns[len(labels) :]
    for key, title, fmt, compare in ROWS:
        cells = [_cell(sums[label].get(key), fmt, w) for label, w in zip(labels, label_widths)]
        ratios = [
            _cell(_ratio(sums[label].get(key), sums[labels[0]].get(key)), "{:.2f}", w) if compare else " " * w
            for label, w in zip(labels[1:], ratio_widths)
        ]
        print(f"{title:<{width}}" + "".join(cells) + "".join(ratios))


def _cell(value, fmt: str, width: int = 8) -> str:
    if value is None:
        return f"{'-':>{width}}"
    return f"{fmt.format(value):>{width}}"


# -- command line ----------------------------------------------------------------------------------
def main_cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="quickstart")
    parser.add_argument(
        "--config", action="append", help="config files, replacing the workload's (repeat; later ones win)"
    )
    parser.add_argument(
        "--steps", type=int, default=4, help="training steps per run (default 4: 1 warm-up + 3 measured)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="first steps of each run left out of the summary (engine start, first touch)",
    )
    parser.add_argument("--prompts", type=int, help="prompts per step (data.prompts_per_step)")
    parser.add_argument("--samples", type=int, help="responses per prompt (rollout.sampling.n)")
    parser.add_argument("--max-new-tokens", type=int, help="rollout.sampling.max_new_tokens")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for lite-ppo fit, e.g. model.micro_batch_size=8 (repeat)",
    )
    parser.add_argument("--label", default="run", help="name of this series; each label is a column of the table")
    parser.add_argument(
        "--json",
        type=Path,
        default=REPO / "runs" / "bench_steps.json",
        help="where runs accumulate (default runs/bench_steps.json)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="print the stored table of the workload, run nothing"
    )
    parser.add_argument("--probe-size", type=int, default=2048, help="n of the n x n fp32 matmul probe (default 2048)")
    parser.add_argument(
        "--probe-seconds",
        type=float,
        default=2.0,
        help="seconds each probe repeats its matmul, at least 3 times (default 2)",
    )
    known, rest = parser.parse_known_args(argv)
    if known.report_only:
        if not known.json.exists():
            raise SystemExit(f"bench_steps: {known.json} does not exist yet")
        print_table(json.loads(known.json.read_text()), known.workload, known.warmup)
        return
    if known.steps <= known.warmup:
        parser.error(f"--steps {known.steps} leaves no step after --warmup {known.warmup}")
    workload = WORKLOADS[known.workload]
    configs = known.config or [str(REPO / c) for c in workload.configs]
    overrides = list(workload.overrides)
    for key, value in (
        ("data.prompts_per_step", known.prompts or workload.prompts),
        ("rollout.sampling.n", known.samples or workload.samples),
        ("rollout.sampling.max_new_tokens", known.max_new_tokens or workload.max_new_tokens),
    ):
        if value is not None:
            overrides.append(f"--{key}={value}")
    for item in known.set:
        if "=" not in item:
            parser.error(f"--set {item}: expected KEY=VALUE, e.g. model.micro_batch_size=8")
        overrides.append(f"--{item.removeprefix('--')}")
    overrides += rest
    run = run_once(configs, overrides, known.steps, known.probe_size, known.probe_seconds)
    run["label"], run["workload"] = known.label, known.workload
    signature = {
        "configs": [
            str(Path(c).resolve().relative_to(REPO)) if Path(c).resolve().is_relative_to(REPO) else c for c in configs
        ],
        "overrides": overrides,
        "steps": known.steps,
        "freed_memory_kept": run["machine"]["freed_memory_kept"],
    }
    data = store(known.json, known.workload, known.label, signature, run)
    print_steps(run)
    print_table(data, known.workload, known.warmup)
    print(f"\nstored in {known.json} (workload {known.workload!r}, label {known.label!r})")


if __name__ == "__main__":
    main_cli()
