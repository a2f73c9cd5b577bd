"""Seconds per training step of the quickstart, split into generation, reward, old log-probs and
training, with tokens/s of generation and training.

    python benchmarks/bench_steps.py                       # configs/quickstart.yaml, 3 steps
    python benchmarks/bench_steps.py --steps 5 --config configs/recipes/lite_ppo.yaml --config configs/models/tiny.yaml

It runs `lite-ppo fit` for N steps (no validation; checkpoints the config asks for land in the
temporary folder too) into a temporary folder, reads
the TensorBoard scalars back and prints one row per step plus the mean over steps after the first
(the first pays engine start-up and warm-up).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import read_scalars  # noqa: E402

from lite_ppo.cli import main  # noqa: E402

COLUMNS = [
    ("generation s", "time/generation_s"),
    ("reward s", "time/reward_s"),
    ("old logp s", "time/old_logprobs_s"),
    ("train s", "time/update_s"),
    ("gen tok/s", "time/generation_tokens_per_s"),
    ("train tok/s", "time/update_tokens_per_s"),
    ("resp len", "response/length_mean"),
]


def run(configs: list[str], steps: int, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = ["fit"]
        for config in configs:
            args += ["--config", config]
        args += [
            f"--trainer.default_root_dir={tmp}",
            f"--trainer.logger.init_args.save_dir={tmp}",
            f"--trainer.max_steps=-1",
            f"--trainer.limit_train_batches={steps}",
            "--trainer.max_epochs=1",
            "--trainer.limit_val_batches=0",
            "--trainer.num_sanity_val_steps=0",
            *extra,
        ]
        main(args)
        scalars = read_scalars(Path(tmp))
    print("\nstep | " + " | ".join(name for name, _ in COLUMNS) + " | total s")
    rows = []
    for i in range(steps):
        values = [dict(scalars.get(tag, [])).get(_step_key(scalars, tag, i), float("nan")) for _, tag in COLUMNS]
        total = sum(values[:4])
        rows.append(values + [total])
        print(f"{i:4d} | " + " | ".join(f"{v:10.2f}" for v in values) + f" | {total:8.2f}")
    if len(rows) > 1:
        mean = [sum(col) / len(col) for col in zip(*rows[1:])]
        print("mean (steps 1..) | " + " | ".join(f"{v:10.2f}" for v in mean))


def _step_key(scalars, tag, i):
    steps = sorted(step for step, _ in scalars.get(tag, []))
    return steps[i] if i < len(steps) else None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", help="config files (default configs/quickstart.yaml)")
    parser.add_argument("--steps", type=int, default=3)
    known, rest = parser.parse_known_args()
    run(known.config or [str(REPO / "configs/quickstart.yaml")], known.steps, rest)
