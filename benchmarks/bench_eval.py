r"""Greedy accuracy and wall time of ``lite-ppo evaluate`` with the HF engine and the vLLM engine.

Default setting: SmolLM2-135M-Instruct, greedy, GSM8K test (first 200 problems) and
MATH-500 (first 100), with the training prompt template and reward. Each engine runs
``lite-ppo evaluate`` in its own process (one in-process vLLM engine per process); the script
then prints accuracy, wall time, generation tokens/s and truncation per engine and benchmark,
and how often the two engines' greedy responses and verdicts agree problem by problem.

Usage::

    python benchmarks/bench_eval.py --data-dir DIR_OF_BENCHMARK_FILES
    python benchmarks/bench_eval.py --data-dir DIR_OF_BENCHMARK_FILES --engines vllm --max-new-tokens 1024
    # a smoke run (seconds):
    python benchmarks/bench_eval.py --data-dir DIR_OF_BENCHMARK_FILES --model builtin:tiny \
        --gsm8k 2 --math500 2 --max-new-tokens 8

A benchmark's wall time is generation plus scoring of its problems; the engine's start-up is
reported on its own line, and the whole process time (imports, model load, start-up) on another;
``gen s`` is the time spent inside the engine's ``generate`` calls. Set ``OMP_NUM_THREADS`` / ``VLLM_CPU_KVCACHE_SPACE``
as for training; results land in ``--out`` (``<engine>/metrics.json`` etc.) and, with ``--json``,
in one summary file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="builtin:smollm2-135m-instruct", help="HF folder, builtin:<name> or .ckpt")
    p.add_argument(
        "--data-dir",
        default=str(REPO.parent / "shared" / "data" / "eval"),
        help="folder with gsm8k_test.jsonl and math500.jsonl",
    )
    p.add_argument("--engines", default="hf,vllm", help="comma-separated subset of hf,vllm")
    p.add_argument("--gsm8k", type=int, default=200, help="first N GSM8K test problems (0: skip)")
    p.add_argument("--math500", type=int, default=100, help="first N MATH-500 problems (0: skip)")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="problems per generate call (default: the command's, 16 hf / 256 vllm)",
    )
    p.add_argument("--dtype", default="float32", help="policy dtype, and the vLLM engine's (float32 or bfloat16)")
    p.add_argument("--out", default=None, help="output folder (default: a temporary folder)")
    p.add_argument("--json", default=None, help="write the summary here")
    return p.parse_args(argv)


def benchmark_config(folder: Path, gsm8k: int, math500: int) -> Path:
    entries = []
    if gsm8k:
        entries.append(f"  - {{name: gsm8k, file: gsm8k_test.jsonl, title: GSM8K, limit: {gsm8k}}}")
    if math500:
        entries.append(f"  - {{name: math500, file: math500.jsonl, title: MATH-500, limit: {math500}}}")
    if not entries:
        raise SystemExit("nothing to evaluate: --gsm8k and --math500 are both 0")
    path = folder / "bench_benchmarks.yaml"
    path.write_text("benchmarks:\n" + "\n".join(entries) + "\n")
    return path


def run_engine(engine: str, args: argparse.Namespace, config: Path, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "lite_ppo.cli",
        "evaluate",
        "--model",
        args.model,
        "--benchmarks",
        str(config),
        "--data-dir",
        args.data_dir,
        "--out",
        str(out),
        "--engine",
        engine,
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--dtype",
        args.dtype,
        "--no-progress",
    ]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    print(f"[{engine}] {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    process_s = time.perf_counter() - start
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["process_wall_s"] = process_s
    return metrics


def responses(out: Path) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    return {(r["benchmark"], r["id"]): r for r in rows}


def main(argv=None) -> None:
    args = parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_eval_"))
    root.mkdir(parents=True, exist_ok=True)
    config = benchmark_config(root, args.gsm8k, args.math500)
    results = {engine: run_engine(engine, args, config, root / engine) for engine in engines}

    summary = {"model": args.model, "max_new_tokens": args.max_new_tokens, "engines": {}}
    header = (
        f"{'engine':<6} {'benchmark':<10} {'problems':>8} {'accuracy %':>10} {'wall s':>8} {'gen s':>8} "
        f"{'tok/s':>8} {'trunc %':>8} {'unparsed %':>10}"
    )
    lines = [header, "-" * len(header)]
    for engine, m in results.items():
        summary["engines"][engine] = {
            "process_wall_s": m["process_wall_s"],
            "evaluation_wall_s": m["wall_time_s"],
            "benchmarks": {},
        }
        for name, b in m["benchmarks"].items():
            t = m["timing"][name]
            summary["engines"][engine]["benchmarks"][name] = {**b, **t}
            lines.append(
                f"{engine:<6} {name:<10} {int(b['num_problems']):>8} {100 * b['accuracy']:>10.1f} "
                f"{t['wall_time_s']:>8.1f} {t['generation_s']:>8.1f} {t['tokens_per_s']:>8.1f} "
                f"{100 * b['truncation_rate']:>8.1f} {100 * b['unparsed_rate']:>10.1f}"
            )
        setup_s = m["timing"].get("engine_setup", {}).get("wall_time_s", 0.0)
        summary["engines"][engine]["engine_setup_s"] = setup_s
        lines.append(f"{engine:<6} {'(start-up)':<10} {'':>8} {'':>10} {setup_s:>8.1f}   (engine start-up)")
        lines.append(
            f"{engine:<6} {'(process)':<10} {'':>8} {'':>10} {m['process_wall_s']:>8.1f}   "
            "(everything: imports, model load, start-up, all benchmarks)"
        )
    print("\n".join(lines))

    if len(results) == 2:
        a, b = (responses(root / e) for e in engines)
        keys = sorted(set(a) & set(b))
        same_text = sum(a[k]["response"] == b[k]["response"] for k in keys) / max(len(keys), 1)
        same_verdict = sum(a[k]["correct"] == b[k]["correct"] for k in keys) / max(len(keys), 1)
        summary["agreement"] = {"problems": len(keys), "identical_response": same_text, "same_verdict": same_verdict}
        print(
            f"\n{engines[0]} vs {engines[1]} on {len(keys)} problems: identical greedy responses {100 * same_text:.1f} "
            f"%, same verdict {100 * same_verdict:.1f} %"
        )
    print(f"\nreports: {root}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
