"""The learning-rate schedule of a fit: how many optimizer steps it plans, and the factor at each.

Under manual optimization there are ``num_mini_batches`` optimizer steps per rollout step, so the
schedule counts optimizer steps, not rollout batches. In YAML::

    model: {lr: 1.0e-6, warmup_steps: 10, lr_schedule: cosine, min_lr_ratio: 0.1}
"""

from __future__ import annotations

import math
from collections.abc import Callable


def planned_optimizer_steps(trainer, num_mini_batches: int) -> int | float:
    """Optimizer steps the fit will run: ``num_mini_batches`` per rollout step, capped by ``max_steps``.

    Under manual optimization ``trainer.global_step`` (and so ``trainer.max_steps``) counts
    ``optimizer.step()`` calls, while the epoch budget counts rollout batches; Lightning's
    ``estimated_stepping_batches`` takes the min of the two without converting units.
    """
    if trainer is None:
        return 1
    if trainer.max_epochs == -1:  # no epoch budget: max_steps alone (inf when it is -1 too)
        return max(1, trainer.max_steps) if trainer.max_steps != -1 else math.inf
    trainer.estimated_stepping_batches  # noqa: B018 (sets up the train loader when needed)
    batches = trainer.num_training_batches
    if batches == math.inf:
        return max(1, trainer.max_steps) if trainer.max_steps != -1 else math.inf
    total = int(batches) * max(trainer.max_epochs, 1) * num_mini_batches
    return max(1, min(total, trainer.max_steps) if trainer.max_steps != -1 else total)


def planned_rollout_steps(trainer, num_mini_batches: int) -> int | None:
    """Rollout steps (training batches) the fit will run: the epochs' batches, cut by ``max_steps``
    (optimizer steps, ``num_mini_batches`` per rollout step); None when unknown."""
    batches = getattr(trainer, "num_training_batches", None)
    if not isinstance(batches, (int, float)) or not math.isfinite(batches) or not trainer.max_epochs:
        by_epochs = None
    else:
        by_epochs = int(batches) * max(trainer.max_epochs, 1) if trainer.max_epochs != -1 else None
    max_steps = getattr(trainer, "max_steps", -1)
    by_steps = -(-max_steps // max(num_mini_batches, 1)) if isinstance(max_steps, int) and max_steps > 0 else None
    known = [n for n in (by_epochs, by_steps) if n is not None]
    return min(known) if known else None


def short_run_note(trainer, num_mini_batches: int) -> str | None:
    """A note when ``trainer.max_steps`` ends the fit before its epoch does: the end-of-epoch held-out
    evaluation then never runs (``compare`` gets no score), and ``data.steps_per_epoch`` is the knob
    that shortens a run and keeps it."""
    if not isinstance(getattr(trainer, "max_steps", -1), int) or trainer.max_steps <= 0:
        return None  # no step cap: nothing to say (and the train loader is not set up early)
    try:
        trainer.estimated_stepping_batches  # noqa: B018 (sets up the train loader when needed)
    except Exception:  # noqa: BLE001 - only a note; a loader that cannot say has no note
        return None
    batches = getattr(trainer, "num_training_batches", None)
    max_steps = getattr(trainer, "max_steps", -1)
    if not isinstance(batches, (int, float)) or not math.isfinite(batches) or not isinstance(max_steps, int):
        return None
    if max_steps <= 0 or trainer.max_epochs in (None, -1):
        return None
    run = planned_rollout_steps(trainer, num_mini_batches)
    if run is None or run >= int(batches):
        return None
    return (
        f"trainer.max_steps={max_steps} (optimizer steps, {num_mini_batches} per rollout step) stops after {run} of "
        f"the epoch's {int(batches)} rollout steps, before the end-of-epoch held-out evaluation; for a short run "
        f"with its evaluation set --data.steps_per_epoch={run} instead"
    )


def lr_lambda(warmup_steps: int, schedule: str, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """The factor of ``model.lr`` after ``step`` optimizer steps: a linear warm-up over ``warmup_steps``,
    then constant or a cosine down to ``min_ratio`` at the last of ``total_steps``."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "cosine":
            # `step` counts the optimizer steps already taken (the scheduler steps after each), so
            # the last optimizer step, step = total_steps - 1, runs at exactly min_ratio * lr.
            progress = min(1.0, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
            return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return factor
