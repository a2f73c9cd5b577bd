"""Peak memory and seconds per step of LoRA against full fine-tuning, by model size, and the largest
model of each kind that fits this machine's memory.

    python benchmarks/bench_lora_memory.py                        # 135M, 360M, 1.1B and 1.7B
    python benchmarks/bench_lora_memory.py --sizes 135m 360m      # a subset
    python benchmarks/bench_lora_memory.py --engine hf            # the HF engine: no engine copy of the weights
    python benchmarks/bench_lora_memory.py --report-only          # the table from the JSON file

Each (size, mode) is one ``benchmarks/bench_steps.py`` run in its own process: the quickstart
workload (``configs/quickstart.yaml``, vLLM in float32, 1 GiB of KV cache) cut to ``--prompts``
prompts x ``--samples`` samples x ``--max-new-tokens`` tokens. LoRA adds ``configs/lora.yaml``
(rank 16 on the 7 projections). ``--engine hf`` adds ``configs/engines/hf.yaml``, whose engine
generates with the policy itself instead of holding a copy of the weights.

``135m`` is SmolLM2-135M-Instruct itself. The larger sizes have random weights (built once under
``--models-dir``, the 135M tokenizer beside them) and published shapes: SmolLM2-360M (32 layers of
width 960), TinyLlama-1.1B's layers (22 of width 2048, 4 KV heads) on SmolLM2's vocabulary, and
SmolLM2-1.7B (24 layers of width 2048). Memory and time do not depend on the weights' values,
except through response lengths: a random model never emits its end token, so every response runs
to ``--max-new-tokens`` and all sizes do equal work.

Peak memory is the process's peak RSS (``memory/peak_rss_gib``): policy, optimizer state,
activations, and with vLLM the engine's own copy of the weights and its KV cache. For each mode a
line ``RSS = a + b * params`` is fitted by least squares over the sizes measured, and the largest
model within ``--budget-gib`` (default: this machine's memory less 1 GiB for the system) is read
off it. Sizes already in ``--json`` are not run again (``--again`` adds a run). A run that the
sizes already measured predict above the budget is not started (the table says "predicted"): on a
machine without swap it would only meet the OOM killer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_STEPS = REPO / "benchmarks" / "bench_steps.py"
WORKLOAD = "quickstart"

# Published Llama-architecture configurations (hidden size, MLP width, layers, attention heads, KV
# heads) on SmolLM2's vocabulary (49152), tied embeddings and head dimension 64.
SHAPES = {
    "135m": None,  # the shipped model itself
    "360m": dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                 num_key_value_heads=5),
    # TinyLlama-1.1B's layer shapes (its own vocabulary is smaller: the SmolLM2 tokenizer's ids need 49152)
    "1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4),
    "1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32),
}  # fmt: skip
MODES = ("full", "lora")
BASE = "builtin:smollm2-135m-instruct"


def prepare(size: str, models_dir: Path, build: bool = True) -> dict:
    """The model path of ``size`` (the shipped 135M, or a random-weight folder of the larger shape,
    built once when ``build``) and its parameter count (tied embeddings once, from the shape alone).
    Runs in a child process (``--prepare``): the driver stays small, so its memory never shows in a
    measured process's peak (a forked child's peak RSS starts at its parent's, and survives ``exec``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.models.registry import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(BASE))
    for key, value in (SHAPES[size] or {}).items():
        setattr(config, key, value)
    path = BASE if SHAPES[size] is None else str(models_dir / f"llama-{size}-random")
    if build and SHAPES[size] is not None and not (Path(path) / "config.json").exists():
        print(f"bench_lora_memory: building {path} (random weights, float32)", file=sys.stderr, flush=True)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        staging = Path(path + ".partial")
        model.save_pretrained(staging)
        AutoTokenizer.from_pretrained(resolve_model(BASE)).save_pretrained(staging)
        del model
        staging.rename(path)  # complete or absent: an interrupted build is redone
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {"path": path, "params": sum(p.numel() for p in model.parameters())}


def prepared(size: str, models_dir: Path, build: bool) -> dict:
    """:func:`prepare` in a child process."""
    command = [sys.executable, __file__, "--prepare", size, "--models-dir", str(models_dir)]
    if not build:
        command.append("--report-only")
    out = subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def label(size: str, mode: str, engine: str) -> str:
    return f"{size}-{mode}" + ("" if engine == "vllm" else f"-{engine}")


def run(size: str, mode: str, model_path: str, args: argparse.Namespace) -> None:
    """One bench_steps run of ``size`` in ``mode``, in its own process (the peak RSS is that process's)."""
    configs = ["--config", "configs/quickstart.yaml"]
    if args.engine == "hf":
        configs += ["--config", "configs/engines/hf.yaml"]
    if mode == "lora":
        configs += ["--config", "configs/lora.yaml"]
    command = [
        sys.executable, str(BENCH_STEPS), "--workload", WORKLOAD, *configs, "--label", label(size, mode, args.engine),
        "--steps", str(args.steps), "--prompts", str(args.prompts), "--samples", str(args.samples),
        "--max-new-tokens", str(args.max_new_tokens), "--set", f"model.model_path={model_path}",
        "--json", str(args.json),
    ]  # fmt: skip
    print(f"bench_lora_memory: {size} {mode}: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=REPO, check=True)


def measured(path: Path) -> dict[str, dict]:
    """label -> peak RSS (the largest over the label's runs) and the median of each phase's seconds
    over the steps after the first (engine start, first touch), from bench_steps' JSON file.
    (Read here rather than through bench_steps, which imports torch: the driver stays small.)"""
    if not path.exists():
        return {}
    series = json.loads(path.read_text())["series"].get(WORKLOAD, {})
    out = {}
    for label, entry in series.items():
        steps = [row for run in entry["runs"] for row in run["steps"]]
        steady = [row for run in entry["runs"] for row in run["steps"][1:]] or steps
        row = {"peak_rss_gib": max(r["peak_rss_gib"] for r in steps)}
        for key in ("step_s", "update_s", "weight_sync_s", "generation_s"):
            values = [r[key] for r in steady if isinstance(r.get(key), (int, float))]
            row[key] = statistics.median(values) if values else None
        out[label] = row
    return out


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares ``y = a + b x`` through ``points`` (None with fewer than two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def default_budget_gib() -> float:
    """This machine's memory (MemTotal) less 1 GiB for the system and everything else."""
    with open("/proc/meminfo") as f:
        total_kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return total_kib / 2**20 - 1


def report(sizes: list[str], params: dict[str, int], results: dict[str, dict], budget: float, engine: str) -> None:
    print(f"\nquickstart workload, {engine} engine, {os.cpu_count()} CPUs; budget {budget:.1f} GiB")
    print(f"{'size':>6} | {'params (M)':>10} | {'mode':>4} | {'peak RSS GiB':>12} | {'s/step':>7} | {'update s':>8} | "
          f"{'sync s':>6} | {'gen s':>6}")  # fmt: skip
    lines = {}
    for mode in MODES:
        points = [
            (params[s] / 1e9, results[label(s, mode, engine)]["peak_rss_gib"])
            for s in sizes
            if results.get(label(s, mode, engine), {}).get("peak_rss_gib") is not None
        ]
        lines[mode] = fit_line(points)
    for size in sizes:
        for mode in MODES:
            row = results.get(label(size, mode, engine))
            if row is None:
                line = lines[mode]
                guess = f"{line[0] + line[1] * params[size] / 1e9:.1f} predicted" if line else "not run"
                print(f"{size:>6} | {params[size] / 1e6:10.0f} | {mode:>4} | {guess:>12} |")
                continue
            cells = [row.get(k) for k in ("step_s", "update_s", "weight_sync_s", "generation_s")]
            print(
                f"{size:>6} | {params[size] / 1e6:10.0f} | {mode:>4} | {row['peak_rss_gib']:12.2f} | "
                + " | ".join(f"{c:{w}.2f}" if c is not None else " " * w for c, w in zip(cells, (7, 8, 6, 6)))
            )
    for mode, line in lines.items():
        if line is None:
            print(f"{mode}: fewer than two sizes measured, no fit")
            continue
        a, b = line
        if b <= 0:
            print(f"{mode}: peak RSS does not grow with the model over the sizes measured; no extrapolation")
            continue
        largest = (budget - a) / b
        print(f"{mode}: peak RSS = {a:.2f} GiB + {b:.2f} GiB per billion parameters; "
              f"largest within {budget:.1f} GiB: {largest:.2f} B parameters")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--engine",
        choices=["vllm", "hf"],
        default="vllm",
        help="vllm: the quickstart's engine, its own copy of the weights; hf: configs/engines/hf.yaml, generating "
        "with the policy itself (no second copy)",
    )
    parser.add_argument("--steps", type=int, default=3, help="steps per run, the first left out of the times")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--budget-gib", type=float, default=None, help="default: MemTotal less 1 GiB")
    parser.add_argument("--models-dir", type=Path, default=REPO / "runs" / "lora_memory_models")
    parser.add_argument("--json", type=Path, default=REPO / "runs" / "bench_lora_memory.json")
    parser.add_argument("--report-only", action="store_true", help="print the table from --json, run nothing")
    parser.add_argument("--prepare", choices=list(SHAPES), help=argparse.SUPPRESS)  # the child of prepared()
    parser.add_argument("--again", action="store_true", help="run sizes already in --json again (their runs add up)")
    args = parser.parse_args(argv)
    if args.prepare:
        print(json.dumps(prepare(args.prepare, args.models_dir, build=not args.report_only)))
        return
    budget = args.budget_gib if args.budget_gib is not None else default_budget_gib()
    sizes = sorted(args.sizes, key=list(SHAPES).index)  # smallest first: they predict the larger ones

    models = {size: prepared(size, args.models_dir, build=not args.report_only) for size in sizes}
    paths = {size: m["path"] for size, m in models.items()}
    params = {size: m["params"] for size, m in models.items()}
    if not args.report_only:
        for size in sizes:
            for mode in args.modes:
                results = measured(args.json)
                if label(size, mode, args.engine) in results and not args.again:
                    continue  # measured already (an interrupted series resumes)
                points = [(params[s] / 1e9, results[label(s, mode, args.engine)]["peak_rss_gib"])
                          for s in sizes if label(s, mode, args.engine) in results]  # fmt: skip
                line = fit_line(points)
                if line is not None and line[0] + line[1] * params[size] / 1e9 > budget:
                    print(f"bench_lora_memory: {size} {mode} predicted above {budget:.1f} GiB: not started")
                    continue
                run(size, mode, paths[size], args)
    report(sizes, params, measured(args.json), budget, args.engine)


if __name__ == "__main__":
    main()
