"""Run folders of known scalars for the research commands' tests: event files, run.json and config.yaml
as ``lite-ppo fit`` writes them, with values a test can compute by hand."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from lite_ppo import metric_names as m

# recipe -> seed -> (steps, final training accuracy, entropy offset)
RUNS = {
    "alpha": {0: (10, 0.5, 0.0), 1: (8, 0.6, 0.1), 2: (10, 0.7, 0.2)},
    "beta": {0: (6, 0.2, 0.0), 1: (6, 0.4, 0.3)},
}


def accuracy(step: int, steps: int, final: float) -> float:
    """A linear ramp from 0 to ``final`` over the run (first step 0, last step ``steps - 1``)."""
    return final * step / (steps - 1)


def write_run(
    root: Path, recipe: str, seed: int, steps: int, final: float, offset: float, *, clip: bool, lr: float = 1e-6
) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    run_dir = root / recipe / "tiny" / f"seed{seed}"
    run_dir.mkdir(parents=True)
    writer = SummaryWriter(str(run_dir))
    for t in range(steps):
        writer.add_scalar(m.REWARD_ACCURACY, accuracy(t, steps, final), t)
        writer.add_scalar(m.ENTROPY, 1.0 + offset - 0.05 * t, t)
        writer.add_scalar(m.RESPONSE_LENGTH, 100.0 + 10 * t + seed, t)
        writer.add_scalar(m.TRUNCATION_RATE, 0.1 - 0.01 * t, t)
        if clip:
            writer.add_scalar(m.CLIP_UPPER_POSITIVE, 0.02, t)
    if clip:  # held-out accuracy before training and at the end (alpha only)
        writer.add_scalar(m.val_accuracy("easy"), 0.2, 0)
        writer.add_scalar(m.val_accuracy("easy"), 0.3 + 0.1 * seed, steps - 1)
    writer.close()
    (run_dir / "run.json").write_text(
        json.dumps(
            {"recipe": recipe, "model": "builtin:tiny", "model_name": "tiny", "seed": seed, "status": "finished"}
        )
    )
    config = {
        "seed_everything": seed,
        "recipe": recipe,
        "model": {"model_path": "builtin:tiny", "lr": lr},
        "data": {"seed": seed},
    }
    config["trainer"] = {"logger": {"init_args": {"version": f"seed{seed}"}}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir
