"""The testbed's properties on the shipped inits at their configs' settings (docs/benchmarks.md, "The testbed").

For each init (``builtin:testbed-base``, ``builtin:testbed-aligned``) and seed ``S``,
:func:`lite_ppo.research.testbed_probe.probe` samples groups for the first ``--problems`` held-out
problems of every tier (the problems the data module holds out for ``data.seed=S``) with
``rollout.sampling`` of ``configs/models/testbed_<init>.yaml`` (its ``max_new_tokens`` is the documented
limit) and generation seed ``S``. Per seed: accuracy per tier, truncation, groups that mix right and
wrong, length figures, styles and entropy per token; printed per init as mean and min-max over seeds,
with a length histogram over all seeds.

    .venv/bin/python benchmarks/bench_testbed.py                      # 5 seeds, 32 problems per tier
    ATEN_CPU_CAPABILITY=default .venv/bin/python benchmarks/bench_testbed.py   # PyTorch's scalar kernels
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]


def sampling_of(init: str):
    from lite_ppo.rollout import SamplingConfig

    config = yaml.safe_load((REPO / "configs" / "models" / f"testbed_{init}.yaml").read_text())
    return SamplingConfig(**config["rollout"]["sampling"])


def main() -> None:
    from lite_ppo.research.testbed_probe import probe, summarize

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inits", nargs="+", default=["base", "aligned"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--problems", type=int, default=32, help="held-out problems per tier and seed")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="probe another limit than the config's")
    parser.add_argument("--json", default=None, help="also write every response's row to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"cpu capability: {torch.backends.cpu.get_cpu_capability()}")
    dump = {}
    for init in args.inits:
        sampling = sampling_of(init)
        if args.max_new_tokens:
            sampling.max_new_tokens = args.max_new_tokens
        start = time.perf_counter()
        per_seed = [probe(f"builtin:testbed-{init}", sampling, seed, args.problems) for seed in args.seeds]
        figures = [summarize(rows, sampling.n) for rows in per_seed]
        dump[init] = [[asdict(r) for r in rows] for rows in per_seed]
        print(
            f"\n### builtin:testbed-{init} (max_new_tokens {sampling.max_new_tokens}, n {sampling.n}, "
            f"seeds {args.seeds}, {args.problems} problems per tier, {time.perf_counter() - start:.0f} s)\n"
        )
        print("| quantity | mean | min | max |\n| --- | --- | --- | --- |")
        for key in figures[0]:
            values = [f[key] for f in figures]
            print(f"| {key} | {statistics.fmean(values):.3f} | {min(values):.3f} | {max(values):.3f} |")
        width = 8
        buckets = Counter((r.length - 1) // width for rows in per_seed for r in rows)
        total = sum(buckets.values())
        print("\nlength histogram (tokens: share of responses, all seeds):")
        for bucket in sorted(buckets):
            low = bucket * width + 1
            share = buckets[bucket] / total
            print(f"  {f'{low}-{low + width - 1}':>9}: {share:6.3f} {'#' * round(60 * share)}")
    if args.json:
        Path(args.json).write_text(json.dumps(dump))


if __name__ == "__main__":
    main()
