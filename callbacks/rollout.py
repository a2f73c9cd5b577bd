"""The rollout callback: prompts -> sampled responses -> rewards -> a RolloutBatch for the module."""

from __future__ import annotations

import resource
import sys
import time
import warnings
from typing import Any, Literal

import torch
from lightning.pytorch import Callback
from lightning.pytorch.utilities import rank_zero_warn

from lite_ppo.data.prompts import PromptFormatter
from lite_ppo.errors import UserError
from lite_ppo.hooks import techniques_of
from lite_ppo import metric_names as names
from lite_ppo.metric_names import OVERLONG_PROMPTS_DROPPED
from lite_ppo.rewards import MathVerifyReward
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.engine import Generation, RolloutEngine, SamplingConfig
from lite_ppo.rollout.default import default_engine


class Rollout(Callback):
    """Generates G responses per prompt with the configured engine, scores them, and hands the
    module a :class:`~lite_ppo.rollout.batch.RolloutBatch` as ``batch["rollout"]``.

    Before each training step: push the policy's weights into the engine if they changed (engines
    that share the policy need nothing), format and tokenize the prompts, generate, decode, score
    with the reward (``RolloutBatch.correct`` holds the verifier's verdicts), run the techniques'
    ``on_rollout`` and ``keep_groups`` hooks, and log the timings (``time/*``). After the step: its
    wall time (``time/step_s``) and peak memory (``memory/*``). It reports each phase
    (``module.report_phase``) so that the console can show what the step is doing. Before each
    validation batch: the same generation and scoring with ``eval_sampling`` (greedy by default),
    and no technique hook runs (``on_rollout`` / ``keep_groups`` are training-only).

    Args:
        engine: the rollout engine: ``VLLMEngine`` (fast) or ``HFEngine`` (portable). Default:
            vLLM when installed, else HF (see ``lite_ppo.rollout.default``).
        sampling: training sampling (paper: n=8, temperature 0.99, top_p 0.99, top_k 100).
        eval_sampling: validation sampling (greedy, one sample by default).
        reward: the verifiable reward (the same object scores evaluation).
        prompt: how problems become prompts (chat template for instruct models).
        seed: base seed of the per-step sampling seeds (step index and rank are added).
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

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.Rollout
              init_args:
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
        seed: int = 42,
        max_refill_rounds: int = 0,
        max_prompt_tokens: int | None = None,
        overlong_prompts: Literal["drop", "refuse"] = "drop",
    ) -> None:
        self.engine = engine if engine is not None else default_engine()
        self.sampling = sampling if sampling is not None else SamplingConfig()
        self.eval_sampling = eval_sampling if eval_sampling is not None else SamplingConfig(n=1, greedy=True, max_new_tokens=self.sampling.max_new_tokens)
        self.reward = reward if reward is not None else MathVerifyReward()
        self.prompt = prompt if prompt is not None else PromptFormatter()
        self.seed = seed
        if max_refill_rounds < 0:
            raise ValueError(f"Rollout.max_refill_rounds must be >= 0, got {max_refill_rounds}")
        self.max_refill_rounds = max_refill_rounds
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise UserError(f"rollout.max_prompt_tokens must be >= 1 or null, got {max_prompt_tokens}")
        if overlong_prompts not in ("drop", "refuse"):
            raise UserError(f"rollout.overlong_prompts must be 'drop' or 'refuse', got {overlong_prompts!r}")
        self.max_prompt_tokens = max_prompt_tokens
        self.overlong_prompts = overlong_prompts
        self._dropped_prompts = 0  # this step, this rank
        self._warned_overlong = False
        self._replacement_round = _REPLACEMENT_FIRST_ROUND  # next refill round for replacements, counted down each step
        self._engine_ready = False
        self._synced_version: int | None = None

    # -- Lightning hooks ---------------------------------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch: dict[str, Any], batch_idx: int) -> None:
        index = int(batch.get("index", batch_idx))
        problems = batch["problems"]
        self._dropped_prompts = 0
        self._replacement_round = _REPLACEMENT_FIRST_ROUND
        self._step_start = time.perf_counter()
        if torch.cuda.is_available() and pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        rollout, timings = self._scored_rollout(trainer, pl_module, problems, index, round_index=0)
        target_groups = len(problems)
        keep = _keep_mask(trainer, pl_module, rollout)
        if keep is not None:
            kept, dropped = rollout.select(_rows(keep)), rollout.select(_rows(~keep))
            rounds = 0
            while rounds < self.max_refill_rounds and _any_rank(pl_module, _num_groups(kept) < target_groups):
                rounds += 1
                extra = trainer.datamodule.refill_batch(index, rounds, trainer.global_rank, trainer.world_size)
                more, more_timings = self._scored_rollout(trainer, pl_module, extra["problems"], index, rounds)
                for name, seconds in more_timings.items():
                    timings[name] = timings.get(name, 0.0) + seconds
                more_keep = _keep_mask(trainer, pl_module, more)
                kept = RolloutBatch.concat([kept, more.select(_rows(more_keep))], pl_module.tokenizer.pad_token_id)
                dropped = RolloutBatch.concat([dropped, more.select(_rows(~more_keep))], pl_module.tokenizer.pad_token_id)
            rollout = self._fill_to(kept, dropped, target_groups, pl_module, rounds)
            pl_module.log("groups/refill_rounds", float(rounds), on_step=True, on_epoch=False, batch_size=1)
            pl_module.log("groups/dropped_rate", 1.0 - (keep.float().mean().item()), on_step=True, on_epoch=False, batch_size=1)
        batch["rollout"] = rollout
        self._log_rollout(pl_module, rollout, timings)
        if self.prompt_token_limit(pl_module, self.sampling) is not None:
            pl_module.log(OVERLONG_PROMPTS_DROPPED, float(self._dropped_prompts), on_step=True, on_epoch=False, batch_size=1, reduce_fx="sum", sync_dist=True)

    def _scored_rollout(self, trainer, module, problems: list, index: int, round_index: int) -> tuple[RolloutBatch, dict[str, float]]:
        seed = self.seed + (index * 1000 + trainer.global_rank) * 1000 + round_index
        problems = self._fitting_problems(trainer, module, problems, index)
        rollout, timings = self.make_rollout(module, problems, self.sampling, seed)
        for technique in techniques_of(trainer):
            technique.on_rollout(trainer, module, rollout)
        return rollout, timings

    def prompt_token_limit(self, module, sampling: SamplingConfig) -> int | None:
        """``max_prompt_tokens``, else the context minus ``sampling.max_new_tokens``: the model's
        (``max_position_embeddings``) or the engine's ``max_model_len`` when smaller (None when
        neither is known)."""
        if self.max_prompt_tokens is not None:
            return self.max_prompt_tokens
        config = getattr(getattr(module, "policy", None), "config", None)
        limits = [getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None), getattr(self.engine, "max_model_len", None)]
        limits = [v for v in limits if isinstance(v, int) and v > 0]
        return min(limits) - sampling.max_new_tokens if limits else None

    def _fitting_problems(self, trainer, module, problems: list, index: int) -> list:
        """``problems`` with every over-long prompt replaced by one that fits (``drop``), or a
        :class:`UserError` naming the first over-long one (``refuse``)."""
        limit = self.prompt_token_limit(module, self.sampling)
        if limit is None:
            return problems
        kept, too_long = self._split_by_prompt_length(problems, module.tokenizer, limit)
        if not too_long:
            return problems
        if self.overlong_prompts == "refuse":
            problem, length = too_long[0]
            raise UserError(
                f"problem {problem.id!r} (tier {problem.tier}) has a {length}-token prompt, over the limit of {limit} "
                "(rollout.max_prompt_tokens, default: the model's context minus rollout.sampling.max_new_tokens); "
                "set rollout.overlong_prompts: drop to skip such problems"
            )
        dropped = len(too_long)
        # Replacements come from the data module's refill stream (positions no regular batch uses),
        # from the top round down so as not to meet dynamic sampling's refill rounds (1, 2, ...).
        refill = getattr(getattr(trainer, "datamodule", None), "refill_batch", None)
        while len(kept) < len(problems) and refill is not None and self._replacement_round > _REPLACEMENT_FIRST_ROUND - _MAX_REPLACEMENT_ROUNDS:
            extra = refill(index, self._replacement_round, trainer.global_rank, trainer.world_size)["problems"]
            fitting, more_too_long = self._split_by_prompt_length(extra, module.tokenizer, limit)
            dropped += len(more_too_long)
            kept += fitting[: len(problems) - len(kept)]
            self._replacement_round -= 1
        if len(kept) < len(problems):
            raise UserError(
                f"could not find {len(problems)} problems with prompts of at most {limit} tokens for step {index} "
                f"({dropped} over-long): raise rollout.max_prompt_tokens or lower rollout.sampling.max_new_tokens"
            )
        self._dropped_prompts += dropped
        if not self._warned_overlong:
            self._warned_overlong = True
            warnings.warn(  # every rank that drops warns once (a rank-zero warning would hide the others')
                f"dropping problems whose prompt is longer than {limit} tokens (first: {too_long[0][0].id!r}, "
                f"{too_long[0][1]} tokens) and replacing them; counted in {OVERLONG_PROMPTS_DROPPED} "
                "(rollout.overlong_prompts: refuse stops the run instead)",
                stacklevel=2,
            )
        return kept

    def _split_by_prompt_length(self, problems: list, tokenizer, limit: int) -> tuple[list, list]:
        """(problems whose prompt fits, [(problem, prompt length)] of the others)."""
        lengths = [len(ids) for ids in self.prompt.encode([p.problem for p in problems], tokenizer)] if problems else []
        fits = [p for p, n in zip(problems, lengths) if n <= limit]
        return fits, [(p, n) for p, n in zip(problems, lengths) if n > limit]

    def _fill_to(self, kept: RolloutBatch, dropped: RolloutBatch, target_groups: int, module, rounds: int) -> RolloutBatch:
        """Exactly ``target_groups`` groups: the first kept ones, topped up with dropped ones."""
        pad = module.tokenizer.pad_token_id
        missing = target_groups - _num_groups(kept)
        if missing > 0:
            rank_zero_warn(
                f"dynamic sampling could not fill the batch after {rounds} refill round(s): {missing} of "
                f"{target_groups} groups are filtered ones (raise Rollout.max_refill_rounds)"
            )
            kept = RolloutBatch.concat([kept, _first_groups(dropped, missing)], pad) if _num_groups(kept) else _first_groups(dropped, missing)
        return _first_groups(kept, target_groups)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch: dict[str, Any], batch_idx: int) -> None:
        """The whole step's wall time and peak memory (this rank), once the update is done."""
        metrics = {names.PEAK_RSS: torch.tensor(_peak_rss_gib())}
        if torch.cuda.is_available() and pl_module.device.type == "cuda":
            metrics[names.PEAK_GPU] = torch.tensor(torch.cuda.max_memory_allocated(pl_module.device) / 2**30)
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
        seconds = time.perf_counter() - getattr(self, "_step_start", time.perf_counter())
        pl_module.log(names.STEP_SECONDS, seconds, on_step=True, on_epoch=False, batch_size=1, prog_bar=True)

    def on_validation_batch_start(self, trainer, pl_module, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        rollout, _ = self.make_rollout(pl_module, batch["problems"], self.eval_sampling, self.seed + batch_idx)
        batch["rollout"] = rollout

    def on_fit_end(self, trainer, pl_module) -> None:
        self.engine.close()
        self._engine_ready = False

    # -- the work ----------------------------------------------------------------------------------
    def prepare(self, module) -> None:
        """Start the engine (once; vLLM takes seconds to a minute). Called lazily by ``make_rollout``."""
        if not self._engine_ready:
            self.engine.setup(module.policy, module.tokenizer, module.model_path)
            self._engine_ready = True

    def make_rollout(self, module, problems: list, sampling: SamplingConfig, seed: int) -> tuple[RolloutBatch, dict[str, float]]:
        """Generate ``sampling.n`` responses for each problem and score them."""
        tokenizer = module.tokenizer
        self.prepare(module)
        timings: dict[str, float] = {}
        if not self.engine.shares_policy_weights and self._synced_version != module.policy_version:
            start = time.perf_counter()
            _report_phase(module, "syncing weights")
            self.engine.sync_weights(module.policy)
            timings["weight_sync_s"] = time.perf_counter() - start
            self._synced_version = module.policy_version

        prompt_ids = self.prompt.encode([p.problem for p in problems], tokenizer)
        start = time.perf_counter()
        _report_phase(module, "generating")
        generations = self.engine.generate(prompt_ids, sampling, seed=seed)
        timings["generation_s"] = time.perf_counter() - start

        flat = [(i, g) for i, group in enumerate(generations) for g in group]
        texts = tokenizer.batch_decode([g.token_ids for _, g in flat], skip_special_tokens=True)
        start = time.perf_counter()
        _report_phase(module, "scoring")
        results = self.reward.score_batch(texts, [problems[i].answer for i, _ in flat])
        timings["reward_s"] = time.perf_counter() - start

        rollout = build_rollout_batch(
            prompt_ids, generations, [r.score for r in results], tokenizer.pad_token_id, sampling.temperature, correct=[r.status == CORRECT_STATUS for r in results]
        )
        rollout.extras.update(
            tier=[problems[i].tier for i, _ in flat],
            problem_id=[problems[i].id for i, _ in flat],
            answer=[problems[i].answer for i, _ in flat],
            response_text=texts,
            reward_status=[r.status for r in results],
            extracted=[r.extracted for r in results],
        )
        return rollout.to(module.device), timings

    def _log_rollout(self, module, rollout: RolloutBatch, timings: dict[str, float]) -> None:
        """Timings of this rank. The reward, verifier-status, group, length and truncation statistics
        of the global batch are the Diagnostics callback's (always on)."""
        metrics = {}
        for name, seconds in timings.items():
            metrics[f"time/{name}"] = torch.tensor(seconds)
        if timings.get("generation_s"):
            metrics["time/generation_tokens_per_s"] = rollout.response_mask.sum().float() / timings["generation_s"]
        module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=rollout.num_responses)


def _report_phase(module, phase: str) -> None:
    """Tell the console what the step is doing (a stand-in module without ``report_phase`` is fine)."""
    report = getattr(module, "report_phase", None)
    if callable(report):
        report(phase)


CORRECT_STATUS = "correct"  # the verifier status of a right answer (lite_ppo.rewards.STATUSES)


def _peak_rss_gib() -> float:
    """Peak resident memory of this process so far, GiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20


# Over-long prompts are replaced from refill rounds counted down from here (dynamic sampling counts up from 1).
_REPLACEMENT_FIRST_ROUND = 1023
_MAX_REPLACEMENT_ROUNDS = 64


def _keep_mask(trainer, module, rollout: RolloutBatch) -> torch.Tensor | None:
    """AND of every technique's ``keep_groups`` mask, or None when no technique filters."""
    keep = None
    for technique in techniques_of(trainer):
        mask = technique.keep_groups(trainer, module, rollout)
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


def _any_rank(module, flag: bool) -> bool:
    """True when ``flag`` holds on any rank, so that all ranks run the same number of rounds."""
    value = torch.tensor(float(flag), device=module.device)
    if module.trainer.world_size > 1:
        value = module.trainer.strategy.reduce(value, reduce_op="sum")
    return bool(value.item() > 0)


def build_rollout_batch(
    prompt_ids: list[list[int]],
    generations: list[list[Generation]],
    rewards: list[float],
    pad_id: int,
    temperature: float,
    correct: list[bool] | None = None,
) -> RolloutBatch:
    """Lay out prompts (left-padded) and responses (right-padded) as one [B, P + R] tensor.

    Response i of prompt p gets group id p. ``rewards`` and ``correct`` (the verifier's verdicts;
    None: ``reward > 0.5``) are in the same flattened order.
    """
    rows = [(p, g) for p, group in enumerate(generations) for g in group]
    p_width = max(len(ids) for ids in prompt_ids)
    r_width = max(1, max(len(g.token_ids) for _, g in rows))
    n = len(rows)
    input_ids = torch.full((n, p_width + r_width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p_width + r_width), dtype=torch.long)
    response_mask = torch.zeros((n, r_width), dtype=torch.float32)
    engine_logprobs = torch.zeros((n, r_width)) if all(g.logprobs is not None for _, g in rows) else None
    for row, (p, g) in enumerate(rows):
        prompt, resp = prompt_ids[p], g.token_ids
        input_ids[row, p_width - len(prompt) : p_width] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[row, p_width - len(prompt) : p_width + len(resp)] = 1
        input_ids[row, p_width : p_width + len(resp)] = torch.tensor(resp, dtype=torch.long)
        response_mask[row, : len(resp)] = 1
        if engine_logprobs is not None:
            engine_logprobs[row, : len(resp)] = torch.tensor(g.logprobs, dtype=torch.float32)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        group_ids=torch.tensor([p for p, _ in rows], dtype=torch.long),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        truncated=torch.tensor([g.truncated for _, g in rows], dtype=torch.bool),
        response_lengths=torch.tensor([len(g.token_ids) for _, g in rows], dtype=torch.long),
        correct=torch.tensor(correct, dtype=torch.bool) if correct is not None else None,
        engine_logprobs=engine_logprobs,
        temperature=temperature if temperature > 0 else 1.0,
    )
