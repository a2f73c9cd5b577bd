"""Rollout production: problems -> prompts -> sampled responses -> rewards -> a RolloutBatch.

The one path every generated response takes, for training (the ``lite_ppo.callbacks.Rollout``
callback), for validation during a fit and for ``lite-ppo evaluate``, so that a number means the
same everywhere. It knows nothing of Lightning's Trainer or of techniques: the callback adds the
technique hooks, the refill loop, logging and phases on top.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

import torch

from lite_ppo.data.problem import Problem
from lite_ppo.data.prompts import PromptFormatter
from lite_ppo.errors import UserError
from lite_ppo.metric_names import OVERLONG_PROMPTS_DROPPED
from lite_ppo.rewards import MathVerifyReward
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.context import context_limit, prompt_budget
from lite_ppo.rollout.default import default_engine
from lite_ppo.rollout.engine import Generation, RolloutEngine, SamplingConfig

CORRECT_STATUS = "correct"  # the verifier status of a right answer (lite_ppo.rewards.STATUSES)


class PolicySource(Protocol):
    """What the producer reads of the policy it samples from (``LitePPO`` has all of it)."""

    policy: Any  # the causal LM (its ``config`` bounds the context)
    tokenizer: Any
    model_path: str
    policy_version: int  # bumped by every optimizer step; the engine re-syncs when it changed
    device: torch.device  # where the returned batch goes


class RolloutProducer:
    """Generates ``sampling.n`` responses per problem with ``engine``, scores them with ``reward``,
    and lays them out as one :class:`~lite_ppo.rollout.batch.RolloutBatch`.

    Args:
        engine: the rollout engine (default: vLLM when installed, else HF; see
            ``lite_ppo.rollout.default``). Started lazily, at the first :meth:`produce`.
        reward: the verifiable reward; its status per response becomes ``reward_status`` and its
            verdict ``correct``.
        prompt: how problems become prompts (chat template for instruct models).
        max_prompt_tokens: the longest prompt :meth:`fitting_problems` lets through (default: the
            context minus ``sampling.max_new_tokens``, see :meth:`prompt_token_limit`).
        overlong_prompts: what :meth:`fitting_problems` does with a longer prompt: ``drop`` (replace
            it) or ``refuse`` (a :class:`~lite_ppo.errors.UserError` naming it).

    Example::

        producer = RolloutProducer(engine=HFEngine(), prompt=PromptFormatter(style="plain"))
        batch, timings = producer.produce(module, problems, SamplingConfig(n=4), seed=0)
        batch.rewards, batch.reward_status, timings["generation_s"]
    """

    def __init__(
        self,
        engine: RolloutEngine | None = None,
        reward: MathVerifyReward | None = None,
        prompt: PromptFormatter | None = None,
        max_prompt_tokens: int | None = None,
        overlong_prompts: Literal["drop", "refuse"] = "drop",
    ) -> None:
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise UserError(f"rollout.max_prompt_tokens must be >= 1 or null, got {max_prompt_tokens}")
        if overlong_prompts not in ("drop", "refuse"):
            raise UserError(f"rollout.overlong_prompts must be 'drop' or 'refuse', got {overlong_prompts!r}")
        self.engine = engine if engine is not None else default_engine()
        self.reward = reward if reward is not None else MathVerifyReward()
        self.prompt = prompt if prompt is not None else PromptFormatter()
        self.max_prompt_tokens = max_prompt_tokens
        self.overlong_prompts = overlong_prompts
        self._engine_ready = False
        self._synced_version: int | None = None
        self._warned_overlong = False

    @property
    def synced_version(self) -> int | None:
        """The ``policy_version`` whose weights the engine holds (None before the first sync;
        engines that share the policy's weights never need one)."""
        return self._synced_version

    # -- engine lifetime ---------------------------------------------------------------------------
    def prepare(self, source: PolicySource) -> None:
        """Start the engine (once; vLLM takes seconds to a minute). :meth:`produce` calls it."""
        if not self._engine_ready:
            self.engine.setup(source.policy, source.tokenizer, source.model_path)
            self._engine_ready = True

    def close(self) -> None:
        """Stop the engine; the next :meth:`produce` starts it again."""
        self.engine.close()
        self._engine_ready = False

    # -- generation and scoring --------------------------------------------------------------------
    def produce(
        self,
        source: PolicySource,
        problems: list[Problem],
        sampling: SamplingConfig,
        seed: int,
        on_phase: Callable[[str], None] | None = None,
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """Generate ``sampling.n`` responses for each problem and score them.

        Returns the batch (on ``source.device``; ``extras`` holds ``tier``, ``problem_id``,
        ``answer``, ``response_text`` and ``extracted`` for display) and the seconds spent
        (``weight_sync_s`` when the engine was re-synced, ``generation_s``, ``reward_s``).
        ``on_phase`` is told what is running (``syncing weights``, ``generating``, ``scoring``).
        """
        tokenizer = source.tokenizer
        report = on_phase if on_phase is not None else (lambda phase: None)
        self.prepare(source)
        timings: dict[str, float] = {}
        if not self.engine.shares_policy_weights and self._synced_version != source.policy_version:
            start = time.perf_counter()
            report("syncing weights")
            self.engine.sync_weights(source.policy)
            timings["weight_sync_s"] = time.perf_counter() - start
            self._synced_version = source.policy_version

        prompt_ids = self.prompt.encode([p.problem for p in problems], tokenizer)
        start = time.perf_counter()
        report("generating")
        generations = self.engine.generate(prompt_ids, sampling, seed=seed)
        timings["generation_s"] = time.perf_counter() - start

        flat = [(i, g) for i, group in enumerate(generations) for g in group]
        texts = tokenizer.batch_decode([g.token_ids for _, g in flat], skip_special_tokens=True)
        start = time.perf_counter()
        report("scoring")
        results = self.reward.score_batch(texts, [problems[i].answer for i, _ in flat])
        timings["reward_s"] = time.perf_counter() - start

        rollout = build_rollout_batch(
            prompt_ids,
            generations,
            [r.score for r in results],
            tokenizer.pad_token_id,
            sampling.temperature,
            correct=[r.status == CORRECT_STATUS for r in results],
            reward_status=[r.status for r in results],
        )
        rollout.extras.update(
            tier=[problems[i].tier for i, _ in flat],
            problem_id=[problems[i].id for i, _ in flat],
            answer=[problems[i].answer for i, _ in flat],
            response_text=texts,
            extracted=[r.extracted for r in results],
        )
        return rollout.to(source.device), timings

    # -- prompt length -----------------------------------------------------------------------------
    def prompt_token_limit(self, source: PolicySource, sampling: SamplingConfig) -> int | None:
        """``max_prompt_tokens``, else the context minus ``sampling.max_new_tokens``: the model's
        (``max_position_embeddings``) or the engine's ``max_model_len`` when smaller (None when
        neither is known)."""
        if self.max_prompt_tokens is not None:  # no need to read the model's context
            return self.max_prompt_tokens
        limit = context_limit(getattr(getattr(source, "policy", None), "config", None), self.engine)
        return prompt_budget(limit.tokens if limit is not None else None, sampling.max_new_tokens)

    def fitting_problems(
        self,
        source: PolicySource,
        problems: list[Problem],
        sampling: SamplingConfig,
        replacements: Iterator[list[Problem]] | None = None,
        step: int = 0,
    ) -> tuple[list[Problem], int]:
        """``(problems, dropped)``: ``problems`` with every prompt over :meth:`prompt_token_limit`
        replaced by fitting ones taken from ``replacements`` (``drop``; ``dropped`` counts the
        over-long prompts skipped: the batch's and the replacements' up to the last one used), or a
        :class:`UserError` naming the first over-long one (``refuse``). ``step`` only names the step in
        the errors."""
        limit = self.prompt_token_limit(source, sampling)
        if limit is None:
            return problems, 0
        kept, too_long = self._split_by_prompt_length(problems, source.tokenizer, limit)
        if not too_long:
            return problems, 0
        if self.overlong_prompts == "refuse":
            problem, length = too_long[0]
            raise UserError(
                f"problem {problem.id!r} (tier {problem.tier}) has a {length}-token prompt, over the limit of {limit} "
                "(rollout.max_prompt_tokens, default: the model's context minus rollout.sampling.max_new_tokens); "
                "set rollout.overlong_prompts: drop to skip such problems"
            )
        dropped = len(too_long)
        while len(kept) < len(problems):
            extra = next(replacements, None) if replacements is not None else None
            if extra is None:
                break
            # In order, up to the last replacement used: an over-long prompt after it was not skipped.
            for problem, length in zip(extra, self._prompt_lengths(extra, source.tokenizer)):
                if len(kept) == len(problems):
                    break
                if length <= limit:
                    kept.append(problem)
                else:
                    dropped += 1
        if len(kept) < len(problems):
            raise UserError(
                f"could not find {len(problems)} problems with prompts of at most {limit} tokens for step {step} "
                f"({dropped} over-long): raise rollout.max_prompt_tokens or lower rollout.sampling.max_new_tokens"
            )
        if not self._warned_overlong:
            self._warned_overlong = True
            warnings.warn(  # every rank that drops warns once (a rank-zero warning would hide the others')
                f"dropping problems whose prompt is longer than {limit} tokens (first: {too_long[0][0].id!r}, "
                f"{too_long[0][1]} tokens) and replacing them; counted in {OVERLONG_PROMPTS_DROPPED} "
                "(rollout.overlong_prompts: refuse stops the run instead)",
                stacklevel=3,
            )
        return kept, dropped

    def _prompt_lengths(self, problems: list[Problem], tokenizer: Any) -> list[int]:
        return [len(ids) for ids in self.prompt.encode([p.problem for p in problems], tokenizer)] if problems else []

    def _split_by_prompt_length(
        self, problems: list[Problem], tokenizer: Any, limit: int
    ) -> tuple[list[Problem], list[tuple[Problem, int]]]:
        """(problems whose prompt fits, [(problem, prompt length)] of the others)."""
        lengths = self._prompt_lengths(problems, tokenizer)
        fits = [p for p, n in zip(problems, lengths) if n <= limit]
        return fits, [(p, n) for p, n in zip(problems, lengths) if n > limit]


def build_rollout_batch(
    prompt_ids: list[list[int]],
    generations: list[list[Generation]],
    rewards: list[float],
    pad_id: int,
    temperature: float,
    correct: list[bool] | None = None,
    reward_status: list[str] | None = None,
) -> RolloutBatch:
    """Lay out prompts (left-padded) and responses (right-padded) as one [B, P + R] tensor.

    Response i of prompt p gets group id p. ``rewards``, ``correct`` (the verifier's verdicts;
    None: ``reward > 0.5``) and ``reward_status`` are in the same flattened order.

    Example:
        >>> generations = [[Generation([1], True)], [Generation([2, 3], False)]]
        >>> b = build_rollout_batch([[5, 6], [7]], generations, [1.0, 0.0], pad_id=0, temperature=1.0)
        >>> b.input_ids.tolist(), b.group_ids.tolist(), b.truncated.tolist()
        ([[5, 6, 1, 0], [0, 7, 2, 3]], [0, 1], [False, True])
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
        reward_status=list(reward_status) if reward_status is not None else None,
        engine_logprobs=engine_logprobs,
        temperature=temperature if temperature > 0 else 1.0,
    )
