"""The testbed as an instrument: generation, the rollout step and a sweep's runs per hour, old path against
the new default, in one run on one machine.

    python benchmarks/bench_instrument.py                 # all three parts (about 15 minutes on 2 cores)
    python benchmarks/bench_instrument.py --parts generation step
    python benchmarks/bench_instrument.py --sweep-seeds 2 # a shorter sweep part

1. **generation**: one testbed step's rollout (32 prompts of the three tiers x 8 samples, the config's
   sampling, ``builtin:testbed-base``), repeated: ``HFEngine`` at batch 32 (the old testbed setting) and at
   batch 256, and ``BatchedEngine`` (the new default), median seconds and tokens/s; then one forward pass
   (no gradient) over the same prompt + response tokens, the floor that generation is measured against.
2. **step**: ``benchmarks/bench_steps.py --workload testbed`` for the old path (``HFEngine`` at batch 32,
   micro-batches of 32) and the new default config, interleaved, and its table of the phases of a step.
3. **sweep**: a ``lite-ppo sweep`` of ``--sweep-seeds`` Lite PPO runs on the testbed as a study runs them
   (20 steps, the held-out evaluation at the end), timed end to end: the old protocol (old path, 96
   held-out problems, one run at a time, each its own process) against the new default (2,100 held-out
   problems, runs forked from the sweep's fork server) one at a time and ``--parallel 2 --threads 1``, and
   the latter with ``--launch process`` (what the fork server saves); runs per hour of each.

Run it with nothing else on the machine: every figure is a wall-clock time. docs/benchmarks.md holds the
figures with the machine they came from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs/recipes/lite_ppo.yaml"
TESTBED = REPO / "configs/models/testbed_base.yaml"
HF_ENGINE = '{"class_path":"lite_ppo.rollout.HFEngine","init_args":{"batch_size":32}}'
# The old path, as overrides of the new default config: the HF engine and micro-batches of 32.
OLD_PATH = [f"--rollout.engine={HF_ENGINE}", "--model.micro_batch_size=32"]
# The old protocol besides: 32 held-out problems per tier, drawn from each run's data seed.
OLD_PROTOCOL = [*OLD_PATH, "--data.val_size=32", "--data.heldout_seed=null"]


def _step_prompts(tokenizer, prompts: int = 32) -> list[list[int]]:
    from lite_ppo.data.prompts import PromptFormatter
    from lite_ppo.data.synthetic import SyntheticSource
    from lite_ppo.data.testbed import TIERS

    sources = [SyntheticSource(tier, 0, stream="train", family="testbed") for tier in TIERS]
    formatter = PromptFormatter()
    texts = [formatter.format(sources[i % 3].problem(i // 3).problem, tokenizer) for i in range(prompts)]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def bench_generation(reps: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lite_ppo.models import resolve_model
    from lite_ppo.rollout import BatchedEngine, HFEngine, SamplingConfig

    path = resolve_model("builtin:testbed-base")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    prompts = _step_prompts(tokenizer)
    sampling = SamplingConfig(n=8, temperature=0.99, top_p=0.99, top_k=100, max_new_tokens=80)
    engines = {
        "HFEngine batch 32 (old)": HFEngine(batch_size=32),
        "HFEngine batch 256": HFEngine(batch_size=256),
        "BatchedEngine (new)": BatchedEngine(),
    }
    print(f"\n1. generation: {len(prompts)} prompts x {sampling.n} samples, max_new_tokens {sampling.max_new_tokens}")
    rows, last = {}, None
    for name, engine in engines.items():
        engine.setup(model, tokenizer, path)
        engine.generate(prompts[:4], sampling, seed=0)  # warm-up
        seconds, tokens = [], []
        for rep in range(reps):
            start = time.perf_counter()
            out = engine.generate(prompts, sampling, seed=rep)
            seconds.append(time.perf_counter() - start)
            tokens.append(sum(len(g.token_ids) for group in out for g in group))
            last = out
        rows[name] = (statistics.median(seconds), statistics.median(tokens))
    forward = _forward_seconds(model, prompts, last, reps)
    base = rows["HFEngine batch 32 (old)"][0]
    print(f"{'engine':<26}{'s (median)':>12}{'tokens':>9}{'tokens/s':>10}{'speed-up':>10}{'x forward':>11}")
    for name, (seconds, tokens) in rows.items():
        print(
            f"{name:<26}{seconds:>12.3f}{tokens:>9.0f}{tokens / seconds:>10.0f}{base / seconds:>10.2f}"
            f"{seconds / forward:>11.2f}"
        )
    print(f"{'one forward pass (no grad)':<26}{forward:>12.3f}   over the same prompt + response tokens, batches of 64")


def _forward_seconds(model, prompts, groups, reps: int) -> float:
    """Median seconds of one no-gradient forward over every prompt + response (right-padded, 64 a batch)."""
    import torch

    sequences = [p + g.token_ids for p, group in zip(prompts, groups) for g in group]
    times = []
    with torch.inference_mode():
        for _ in range(reps):
            start = time.perf_counter()
            for i in range(0, len(sequences), 64):
                chunk = sequences[i : i + 64]
                width = max(map(len, chunk))
                ids = torch.zeros(len(chunk), width, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for row, seq in enumerate(chunk):
                    ids[row, : len(seq)] = torch.tensor(seq)
                    mask[row, : len(seq)] = 1
                model(input_ids=ids, attention_mask=mask)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_step(steps: int, runs: int) -> None:
    print(f"\n2. the rollout step: bench_steps --workload testbed, {runs} interleaved runs of {steps} steps per path")
    store = Path(tempfile.mkdtemp()) / "bench_steps.json"
    script = str(REPO / "benchmarks/bench_steps.py")
    for _ in range(runs):
        for label, extra in (("old", [f"--set=rollout.engine={HF_ENGINE}", "--set=model.micro_batch_size=32"]),
                             ("new", [])):  # fmt: skip
            cmd = [sys.executable, script, "--workload", "testbed", "--label", label, "--steps", str(steps)]
            subprocess.run([*cmd, "--json", str(store), *extra], check=True, capture_output=True)
    subprocess.run([sys.executable, script, "--workload", "testbed", "--json", str(store), "--report-only"], check=True)


def bench_sweep(seeds: int) -> None:
    print(f"\n3. a sweep of {seeds} testbed runs (Lite PPO, 20 steps, held-out evaluation at the end), end to end")
    process, parallel = ["--launch", "process"], ["--parallel", "2", "--threads", "1"]
    variants = [
        ("old protocol, one at a time", OLD_PROTOCOL, process),  # each run its own process, as before
        ("new default, one at a time", [], []),
        ("new default, --parallel 2 --threads 1 --launch process", [], [*parallel, *process]),
        ("new default, --parallel 2 --threads 1", [], parallel),
    ]
    results = []
    for name, overrides, options in variants:
        out = Path(tempfile.mkdtemp())
        cmd = [sys.executable, "-m", "lite_ppo.cli", "sweep", "--recipe", str(RECIPE), "--config", str(TESTBED)]
        cmd += ["--seed", *map(str, range(seeds)), "--out", str(out), "--no-compare", *options, "--", *overrides]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        seconds = time.perf_counter() - start
        results.append((name, seconds))
        print(f"  {name}: {seconds:.0f} s, {seeds * 3600 / seconds:.0f} runs per hour")
    base = results[0][1]
    for name, seconds in results[1:]:
        print(f"  {name}: {base / seconds:.2f}x the runs per hour of the old protocol")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--parts", nargs="+", choices=["generation", "step", "sweep"], default=["generation", "step", "sweep"]
    )
    parser.add_argument("--reps", type=int, default=5, help="generation repeats (median)")
    parser.add_argument("--steps", type=int, default=6, help="steps per bench_steps run")
    parser.add_argument("--step-runs", type=int, default=2, help="bench_steps runs per path")
    parser.add_argument("--sweep-seeds", type=int, default=4, help="runs in each timed sweep")
    args = parser.parse_args(argv)
    import torch

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f}"
    )
    if "generation" in args.parts:
        bench_generation(args.reps)
    if "step" in args.parts:
        bench_step(args.steps, args.step_runs)
    if "sweep" in args.parts:
        bench_sweep(args.sweep_seeds)
    print(json.dumps({"load_average_end": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
