"""Pilot runs for ``lite-ppo plan`` and ``compare`` tests: event files with known scores, ``run.json`` as
``lite-ppo fit`` and ``sweep`` write it, and per-problem held-out files; values a test can compute by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lite_ppo import metric_names as m


def write_run(path: Path, scalars: dict[str, dict[int, float]], **record) -> Path:
    """A run folder with ``scalars`` (tag -> step -> value) in an event file and ``record`` in ``run.json``."""
    from torch.utils.tensorboard import SummaryWriter

    path.mkdir(parents=True)
    writer = SummaryWriter(str(path))
    for tag, points in scalars.items():
        for step, value in points.items():
            writer.add_scalar(tag, value, step)
    writer.close()
    (path / "run.json").write_text(json.dumps({"model": "builtin:tiny", "model_name": "tiny", **record}))
    return path


def scored_run(
    root: Path, recipe: str, seed: int, score: float | None, steps: int = 6, scores: dict[int, float] | None = None
) -> Path:
    """``root/<recipe>/tiny/seed<S>``: ``steps`` training steps and ``eval/average/accuracy`` ``score`` after
    them (or the evaluations ``scores``: step -> value)."""
    scalars = {
        m.REWARD_ACCURACY: dict.fromkeys(range(steps), 0.5),
        m.POLICY_LOSS: dict.fromkeys(range(steps), 0.1),
        m.EVAL_AVERAGE_ACCURACY: scores if scores is not None else {0: 0.2, steps: score},
    }
    return write_run(root / recipe / "tiny" / f"seed{seed}", scalars, recipe=recipe, seed=seed)


def f32(values: list[float]) -> list[float]:
    """Values as they come back from an event file (float32)."""
    return [float(np.float32(v)) for v in values]


def with_problems(run: Path, correct: np.ndarray, step: int = 2, tier: str = "easy") -> None:
    """Per-problem held-out results of ``run`` at ``step`` (problem ``p<j>`` solved when ``correct[j]``)."""
    problems = [{"id": f"p{j}", "tier": tier, "correct": bool(c)} for j, c in enumerate(correct)]
    (run / "heldout").mkdir()
    (run / "heldout" / f"step_{step}.json").write_text(json.dumps({"step": step, "problems": problems}))


def cell_run(root: Path, cell: dict[str, str], factors: dict[str, list[str]], seed: int, correct: np.ndarray) -> Path:
    """A run of a ``sweep --factor`` cell scored on the ``easy`` tier, with its per-problem results."""
    folder = "_".join(f"{k}={v}" for k, v in cell.items())
    scalars = {m.REWARD_ACCURACY: {0: 0.1, 1: 0.2}, m.val_accuracy("easy"): {0: 0.1, 2: float(correct.mean())}}
    run = write_run(
        root / folder / "lite" / "tiny" / f"seed{seed}", scalars, recipe="lite", seed=seed, cell=cell, factors=factors
    )
    with_problems(run, correct)
    return run
