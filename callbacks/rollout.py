"""The rollout callback: a Lightning adapter over the package's RolloutProducer (prompts ->
sampled responses -> rewards -> a RolloutBatch) that adds the technique hooks, the refill loop,
logging and phases."""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.data.problem import Problem
from lite_ppo.data.prompts import PromptFormatter
from lite_ppo.data.seeding import run_seed
from lite_ppo.metric_names import OVERLONG_PROMPTS_DROPPED
from lite_ppo.rewards import MathVerifyReward
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import RolloutEngine, SamplingConfig
from lite_ppo.rollout.producer import RolloutProducer
from lite_ppo.rollout.settings import RunSettings


class Rollout(Callback):
    """Generates and scores the responses of each training step for the module.

    It generates G responses per prompt with the configured engine, scores them, and is the
    module's :class:`~lite_ppo.training.rollout_source.RolloutSource`: it registers with the module
    at setup, and the module's ``training_step`` asks it for the step's
    :class:`~lite_ppo.rollout.batch.RolloutBatch` (:meth:`training_rollout`) as its first stage.

    The work (engine sync, prompt formatting, generation, decoding, scoring, the batch layout,
    prompt-length checks) is :class:`~lite_ppo.rollout.producer.RolloutProducer`'s, the same code
    ``lite-ppo evaluate`` runs. This callback adds what belongs to training: for each training
    step it has the producer generate and score, then adds every technique's ``shape_rewards`` term
    to the rewards, shows the batch to ``on_rollout`` (read-only), runs ``keep_groups`` and refills
    dropped groups, and logs the timings (``time/*``). After the step: its wall time
    (``time/step_s``) and peak memory (``memory/*``). It reports each phase
    (``module.report_phase``) so that the console can show what the step is doing. For each
    validation batch (:meth:`validation_rollout`): the same generation and scoring with
    ``eval_sampling`` (greedy by default), and no technique hook runs (the hooks are training-only).

    Args:
        engine: the rollout engine: ``VLLMEngine`` (fast) or ``HFEngine`` (portable). Default:
            vLLM when installed, else HF (see ``lite_ppo.rollout.default``).
        sampling: training sampling (paper: n=8, temperature 0.99, top_p 0.99, top_k 100).
        eval_sampling: validation sampling (greedy, one sample by default).
        reward: the verifiable reward (the same object scores evaluation).
        prompt: how problems become prompts (chat template for instruct models).
        seed: base seed of the per-step sampling seeds (step index and rank are added). Default:
            the run's ``seed_everything`` (``lite_ppo.data.seeding.run_seed``), read when first needed.
        max_refill_rounds: when a technique's ``keep_groups`` drops groups (dynamic sampling), at
            most this many extra rounds of prompts are generated to refill the batch. Every rank
            runs the same number of rounds. A batch still short after them is topped up with
            dropped groups (with a warning) so that every rank keeps the same shape.
        max_prompt_tokens: the longest prompt (in tokens, after formatting) a training step may
            generate for. Default: the context (the model's ``max_position_embeddings``, or the
            engine's ``max_model_len`` when smaller) minus ``sampling.max_new_tokens``. Checked
            against the context at fit start.
        overlong_prompts: what a longer training prompt does: ``drop`` skips the problem and takes
            replacements from the data module's refill stream, so every rank keeps its share
            (counted in ``rollout/overlong_prompts_dropped``, warned once); ``refuse`` stops the run
            with an error naming the problem and its length.

    Example (``lite-ppo fit`` config: the CLI builds this callback from its top-level ``rollout:``
    section; a plain Lightning ``Trainer`` takes it in its ``callbacks``)::

        rollout:
          engine: {class_path: lite_ppo.rollout.HFEngine}
          sampling: {n: 8, temperature: 0.99, top_p: 0.99, top_k: 100, max_new_tokens: 8192}
    """

    def __init__(
        self,
        engine: RolloutEngine | None = None,
        sampling: SamplingConfig | None = None,
        eval_sampling: SamplingConfig | None = None,
        reward: MathVerifyReward | None = None,
        prompt: PromptFormatter | None = None,
        seed: int | None = None,
        max_refill_rounds: int = 0,
        max_prompt_tokens: int | None = None,
        overlong_prompts: Literal["drop", "refuse"] = "drop",
    ) -> None:
        if max_refill_rounds < 0:
            raise ValueError(f"Rollout.max_refill_rounds must be >= 0, got {max_refill_rounds}")
        self.producer = RolloutProducer(engine, reward, prompt, max_prompt_tokens, overlong_prompts)
        self.sampling = sampling if sampling is not None else SamplingConfig()
        self.eval_sampling = (
            eval_sampling
            if eval_sampling is not None
            else SamplingConfig(n=1, greedy=True, max_new_tokens=self.sampling.max_new_tokens)
        )
        self._seed = seed
        self.max_refill_rounds = max_refill_rounds
        self._dropped_prompts = 0  # this step, this rank
        self._replacements: Iterator[list[Problem]] | None = None  # this step's stream of replacement problems

    @property
    def seed(self) -> int:
        """The base seed in use: ``seed``, else the run's global seed, fixed at first use."""
        if self._seed is None:
            self._seed = run_seed(None)
        return self._seed

    @property
    def engine(self) -> RolloutEngine:
        return self.producer.engine

    @property
    def reward(self) -> MathVerifyReward:
        return self.producer.reward

    @property
    def prompt(self) -> PromptFormatter:
        return self.producer.prompt

    @property
    def max_prompt_tokens(self) -> int | None:
        return self.producer.max_prompt_tokens

    @property
    def overlong_prompts(self) -> str:
        return self.producer.overlong_prompts

    @property
    def settings(self) -> RunSettings:
        """What this run generates with, handed to every technique at fit start (``configure_run``)."""
        engine = self.engine
        reports = getattr(engine, "return_logprobs", None) is not False and not engine.shares_policy_weights
        return RunSettings(self.sampling, self.eval_sampling, type(engine).__name__, reports)

    # -- Lightning hooks ---------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        pl_module.use_rollout_source(self)

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: dict[str, Any], batch_idx: int
    ) -> None:
        """Starts the step's wall clock and peak-memory count (logged in :meth:`on_train_batch_end`)."""
        self._step_start = time.perf_counter()
        if torch.cuda.is_available() and pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    # -- the module's rollout source -----------------------------------------------------------------
    def training_rollout(
        self, trainer: Trainer, pl_module: LightningModule, batch: dict[str, Any], batch_idx: int
    ) -> RolloutBatch:
        """The training step's batch: generated and scored, every technique's reward term added,
        shown to ``on_rollout``, filtered by ``keep_groups`` and refilled; its timings logged."""
        index = int(batch.get("index", batch_idx))
        problems = batch["problems"]
        self._dropped_prompts = 0
        self._replacements = _replacement_stream(trainer, index)
        rollout, timings = self._scored_rollout(trainer, pl_module, problems, index, round_index=0)
        generated_tokens = rollout.response_mask.sum()  # every round's, for the throughput
        target_groups = len(problems)
        keep = _keep_mask(pl_module, rollout)
        if keep is not None:
            kept, dropped = rollout.select(_rows(keep)), rollout.select(_rows(~keep))
            rounds = 0
            # Every rank runs the same number of rounds (a rank that is short keeps the others going).
            while rounds < self.max_refill_rounds and trainer.strategy.reduce_boolean_decision(
                _num_groups(kept) < target_groups, all=False
            ):
                rounds += 1
                extra = trainer.datamodule.refill_batch(index, rounds, trainer.global_rank, trainer.world_size)
                more, more_timings = self._scored_rollout(trainer, pl_module, extra["problems"], index, rounds)
                generated_tokens = generated_tokens + more.response_mask.sum()
                for name, seconds in more_timings.items():
                    timings[name] = timings.get(name, 0.0) + seconds
                more_keep = _keep_mask(pl_module, more)
                kept = RolloutBatch.concat([kept, more.select(_rows(more_keep))], pl_module.tokenizer.pad_token_id)
                dropped = RolloutBatch.concat(
                    [dropped, more.select(_rows(~more_keep))], pl_module.tokenizer.pad_token_id
                )
            rollout = self._fill_to(kept, dropped, target_groups, pl_module, rounds)
            pl_module.log(names.REFILL_ROUNDS, float(rounds), on_step=True, on_epoch=False, batch_size=1)
            # Over every rank's first round (the step's metrics reduce it), not this rank's alone.
            pl_module.step_context().metrics.mean(names.DROPPED_RATE, (~keep).sum(), keep.numel())
        self._log_rollout(pl_module, rollout, timings, generated_tokens)
        if self.producer.prompt_token_limit(pl_module, self.sampling) is not None:
            pl_module.log(
                OVERLONG_PROMPTS_DROPPED,
                float(self._dropped_prompts),
                on_step=True,
                on_epoch=False,
                batch_size=1,
                reduce_fx="sum",
                sync_dist=True,
            )
        return rollout

    def validation_rollout(
        self, trainer: Trainer, pl_module: LightningModule, batch: dict[str, Any], batch_idx: int
    ) -> RolloutBatch:
        """A validation batch generated and scored with ``eval_sampling``; no technique hook runs."""
        rollout, _ = self.producer.produce(
            pl_module, batch["problems"], self.eval_sampling, self.seed + batch_idx, on_phase=pl_module.report_phase
        )
        return rollout

    def _scored_rollout(
        self, trainer, module, problems: list[Problem], index: int, round_index: int
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """One round: fitting prompts, generated and scored, with every technique's reward term added."""
        seed = self.seed + (index * 1000 + trainer.global_rank) * 1000 + round_index
        problems, dropped = self.producer.fitting_problems(
            module, problems, self.sampling, self._replacements, step=index
        )
        self._dropped_prompts += dropped
        rollout, timings = self.producer.produce(module, problems, self.sampling, seed, on_phase=module.report_phase)
        ctx = module.step_context()
        techniques = ctx.techniques
        # Scalars the techniques record here are reduced and logged with the module's, at the end of the step.
        terms = [term for term in (t.shape_rewards(ctx, rollout) for t in techniques) if term is not None]
        if terms:  # summed, so the result does not depend on the order of the callbacks
            rollout = dataclasses.replace(rollout, rewards=rollout.rewards + torch.stack(terms).sum(0))
        for technique in techniques:
            technique.on_rollout(ctx, rollout)
        return rollout, timings

    def _fill_to(
        self, kept: RolloutBatch, dropped: RolloutBatch, target_groups: int, module, rounds: int
    ) -> RolloutBatch:
        """Exactly ``target_groups`` groups: the first kept ones, topped up with dropped ones."""
        pad = module.tokenizer.pad_token_id
        missing = target_groups - _num_groups(kept)
        if missing > 0:
            rank_zero_warn(
                f"dynamic sampling could not fill the batch after {rounds} refill round(s): {missing} of "
                f"{target_groups} groups are filtered ones (raise Rollout.max_refill_rounds)"
            )
            kept = (
                RolloutBatch.concat([kept, _first_groups(dropped, missing)], pad)
                if _num_groups(kept)
                else _first_groups(dropped, missing)
            )
        return _first_groups(kept, target_groups)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch: dict[str, Any], batch_idx: int
    ) -> None:
        """The whole step's wall time and peak memory (this rank), once the update is done."""
        metrics = {names.PEAK_RSS: torch.tensor(_peak_rss_gib())}
        if torch.cuda.is_available() and pl_module.device.type == "cuda":
            metrics[names.PEAK_GPU] = torch.tensor(torch.cuda.max_memory_allocated(pl_module.device) / 2**30)
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
        seconds = time.perf_counter() - getattr(self, "_step_start", time.perf_counter())
        pl_module.log(names.STEP_SECONDS, seconds, on_step=True, on_epoch=False, batch_size=1, prog_bar=True)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.producer.close()

    def _log_rollout(
        self, module, rollout: RolloutBatch, timings: dict[str, float], generated_tokens: torch.Tensor
    ) -> None:
        """Timings of this rank; the throughput counts every generation round's tokens (the trained
        batch is fewer under dynamic sampling). The reward, verifier-status, group, length and truncation statistics
        of the global batch are the Diagnostics callback's (always on)."""
        metrics = {}
        for name, seconds in timings.items():
            metrics[f"time/{name}"] = torch.tensor(seconds)
        if timings.get("generation_s"):
            metrics["time/generation_tokens_per_s"] = generated_tokens.float() / timings["generation_s"]
        module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=rollout.num_responses)


def _peak_rss_gib() -> float:
    """Peak resident memory of this process so far, GiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20


# Over-long prompts are replaced from refill rounds counted down from here (dynamic sampling counts up from 1).
_REPLACEMENT_FIRST_ROUND = 1023
_MAX_REPLACEMENT_ROUNDS = 64


def _replacement_stream(trainer, index: int) -> Iterator[list[Problem]]:
    """Replacements for over-long prompts of step ``index``: the data module's refill stream (positions
    no regular batch uses), from the top round down so as not to meet dynamic sampling's rounds (1, 2, ...).
    Read lazily: a round is drawn only when a prompt needs replacing."""
    refill = getattr(getattr(trainer, "datamodule", None), "refill_batch", None)
    if refill is None:
        return
    for round_index in range(_REPLACEMENT_FIRST_ROUND, _REPLACEMENT_FIRST_ROUND - _MAX_REPLACEMENT_ROUNDS, -1):
        yield refill(index, round_index, trainer.global_rank, trainer.world_size)["problems"]


def _keep_mask(module, rollout: RolloutBatch) -> torch.Tensor | None:
    """AND of every technique's ``keep_groups`` mask, or None when no technique filters."""
    keep = None
    ctx = module.step_context()
    for technique in ctx.techniques:
        mask = technique.keep_groups(ctx, rollout)
        if mask is not None:
            keep = mask.bool() if keep is None else keep & mask.bool()
    return keep


def _rows(mask: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(mask, as_tuple=False).squeeze(-1)


def _num_groups(batch: RolloutBatch) -> int:
    return int(torch.unique(batch.group_ids).numel())


def _first_groups(batch: RolloutBatch, count: int) -> RolloutBatch:
    """The rows of the first ``count`` distinct groups, in order of first appearance."""
    order: list[int] = []
    for g in batch.group_ids.tolist():
        if g not in order:
            order.append(g)
    chosen = torch.tensor(order[:count], device=batch.group_ids.device)
    return batch.select(_rows(torch.isin(batch.group_ids, chosen)))
