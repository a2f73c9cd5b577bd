"""How long ``lite-ppo compare`` takes on 20 runs x 200 steps (it must stay interactive).

Writes 20 synthetic runs (4 recipes x 5 seeds) with TensorBoard's writer: per step every key
quantity plus filler scalars up to about the number a real run logs (~70 tags), and a length
histogram, so the event files are as large as real ones. Then times, in this process:
reading the event files, and the whole ``compare`` (reading, grouping, figures, summary).

    .venv/bin/python benchmarks/bench_compare.py [--runs 20] [--steps 200] [--tags 70]

Timings on a shared machine are noisy; the figure to look at is the order of magnitude.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def write_runs(root: Path, runs: int, steps: int, tags: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    from lite_ppo.research.quantities import KEY_QUANTITIES

    recipes = ["lite_ppo", "grpo", "dapo", "ppo_baseline"]
    rng = np.random.default_rng(0)
    key_tags = [q.tag for q in KEY_QUANTITIES]
    filler = [f"bench/filler_{i}" for i in range(max(0, tags - len(key_tags)))]
    for i in range(runs):
        recipe, seed = recipes[i % len(recipes)], i // len(recipes)
        run_dir = root / recipe / "bench-model" / f"seed{seed}"
        writer = SummaryWriter(str(run_dir), max_queue=1000)
        for t in range(steps):
            for tag in key_tags + filler:
                writer.add_scalar(tag, float(rng.random()), t)
            writer.add_histogram("response/length", rng.integers(1, 512, size=64), t)
        writer.close()
        (run_dir / "run.json").write_text(
            json.dumps(
                {
                    "recipe": recipe,
                    "model": "bench-model",
                    "model_name": "bench-model",
                    "seed": seed,
                    "status": "finished",
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tags", type=int, default=70)
    args = parser.parse_args()
    from lite_ppo.research.compare import compare
    from lite_ppo.research.runs import find_runs
    from lite_ppo.research.scalars import read_scalars

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        start = time.perf_counter()
        write_runs(root, args.runs, args.steps, args.tags)
        size = sum(p.stat().st_size for p in root.rglob("*tfevents*")) / 2**20
        print(
            f"wrote {args.runs} runs x {args.steps} steps x {args.tags} scalars (+1 histogram): {size:.1f} MiB in "
            f"{time.perf_counter() - start:.1f} s"
        )
        runs = find_runs([str(root)])
        start = time.perf_counter()
        for run in runs:
            read_scalars(run.path)
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        summary = compare([str(root)], Path(tmp) / "cmp")
        total_s = time.perf_counter() - start
        print(f"read event files: {read_s:.2f} s ({read_s / len(runs):.3f} s per run)")
        print(
            f"compare total (read + group + {len(summary['figures'])} PNG + summary): {total_s:.2f} s for {len(runs)} "
            f"runs in {len(summary['groups'])} groups"
        )
        print(f"(reading uses one worker process per CPU, at most 8: {min(8, os.cpu_count() or 1)} here)")


if __name__ == "__main__":
    main()
