"""The LightningModule: the policy and one critic-free PPO update over a rollout batch."""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import replace
from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_warn

from lite_ppo.errors import UserError
from lite_ppo.models import load_causal_lm, load_tokenizer, resolve_model
from lite_ppo.models.lora import LoraSettings, is_lora_model
from lite_ppo.ops import mini_batch_rows, policy_objective
from lite_ppo.ops.factors import multiply_factors
from lite_ppo.policy_module import PhaseListener, step_outputs
from lite_ppo.reliability.divergence import divergence_guard_of
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.rollout.settings import SettingsListener
from lite_ppo.step_context import StepContext
from lite_ppo.step_metrics import StepMetrics
from lite_ppo.strategies.ranks import Ranks
from lite_ppo.strategies.zero import (
    adamw_class,
    hf_zero3_loading,
    set_gradient_clipping,
)
from lite_ppo.technique import (
    PolicyLossConfig,
    Technique,
    build_loss_config,
    needs_old_logprobs_up_front,
    techniques_of,
)
from lite_ppo.training.checkpoint_contents import CheckpointContents
from lite_ppo.training.frozen_model import load_frozen_model
from lite_ppo.training.old_logprobs import OldLogprobPolicy, OldLogprobs
from lite_ppo.training.policy_scorer import PolicyScorer
from lite_ppo.training.preflight import check_fit_settings, check_module_arguments, check_techniques
from lite_ppo.training.rollout_source import RolloutSource, SourceSlot, ValidationRolloutSource
from lite_ppo.training.schedule import lr_lambda, planned_optimizer_steps
from lite_ppo.training.step_statistics import LIVE, step_statistics, update_stats
from lite_ppo.training.update import ppo_update


class LitePPO(LightningModule):
    """Critic-free PPO on a Hugging Face causal LM (the base algorithm of "Tricks or Traps?", Liu et al., 2025).

    One training step = one rollout batch, in the numbered stages of :meth:`training_step`: 1 the
    rollout (from the registered :class:`~lite_ppo.training.rollout_source.RolloutSource`, the
    ``Rollout`` callback), 2 advantages, 3 loss masks, 4 old log-probs
    (:mod:`lite_ppo.training.old_logprobs`) with token weights and the policy mask, 5 the update
    (:mod:`lite_ppo.training.update`: ``num_mini_batches`` optimizer steps, manual optimization),
    6 statistics (:mod:`lite_ppo.training.step_statistics`). Which hook runs where is told once, in
    ``lite_ppo.technique``.

    Which techniques run is decided by the trainer's callbacks (see ``lite_ppo.technique``); the module
    knows only the hook contract. Hooks return what they change; the module builds each stage's
    batch from the answers (:func:`dataclasses.replace`), never editing one in place.

    Args:
        model_path: a local Hugging Face folder, or ``builtin:tiny`` / ``builtin:smollm2-135m-instruct``.
        lr: peak learning rate (paper: 1e-6).
        weight_decay: AdamW's decoupled weight decay (>= 0; 0 = none).
        betas: AdamW's decay rates of the gradient's first and second moments, each in [0, 1).
        warmup_steps: optimizer steps of linear warm-up from 0 to ``lr``.
        lr_schedule: ``constant`` after warm-up, or ``cosine`` decay to ``min_lr_ratio * lr`` over the run.
        min_lr_ratio: the cosine schedule's final learning rate as a share of ``lr`` (in [0, 1]).
        max_grad_norm: gradient clipping by global norm (``None`` disables clipping; the norm is logged anyway).
        clip_eps: the symmetric clip of the base algorithm, and the one source of the lower clip;
            a Clip-Higher technique may widen the upper side.
        num_mini_batches: optimizer steps per rollout batch (each rank's batch divides into this many).
        mini_batch_split: ``row`` (default): response i to mini-batch ``i % num_mini_batches``, a
            slice of every group in each; ``group``: whole groups per mini-batch, group k to
            mini-batch ``k % num_mini_batches`` (each prompt computed once per update when packing,
            a group's advantages zero-mean within each step; falls back to ``row`` when the groups
            on a rank do not divide). See ``ops.mini_batch_rows``.
        micro_batch_size: responses per forward/backward pass (memory bound, no effect on the math).
        micro_batch_tokens: instead of a count, a budget of token positions per forward/backward
            pass: each mini-batch's responses (whole groups with ``pack_prompts``) are sorted by
            length and packed greedily (``ops.token_budget_micro_batches``), so long and short
            responses do not share padding. Same gradient (the loss denominators are global).
        pack_prompts: compute each group's prompt once per forward pass, with its responses
            attending to it and to their own prefix only (``ops.pack_shared_prompts``), and the
            micro-batch's groups back to back in one row, no padding (a row per group under
            gradient checkpointing): the same log-probs and gradients to float rounding, without G
            copies of every prompt.
        logprob_chunk_size: score response tokens this many at a time from the final hidden
            states, so no [b, R, V] logits are kept (``ops.chunked_logprobs``); ``None`` takes
            the model's full logits (and turns packing off).
        torch_dtype: dtype the policy is loaded in (``float32`` is safest for training on CPU;
            use ``precision: bf16-mixed`` in the trainer for speed).
        gradient_checkpointing: trade compute for activation memory.
        old_logprobs: where log pi_old comes from. ``reuse_first`` (default, exact): the first
            mini-batch's from its own forward pass (the policy has not moved yet: its ratio is
            exactly 1), the other rows from one no-gradient pass; ``recompute``: one no-gradient
            pass over every row (always used when a technique overrides ``token_weights``,
            ``policy_mask`` or ``before_update``, or sets ``needs_old_entropy``: they need them all
            before the first optimizer step); ``engine``: the
            rollout engine's log-probs, no pass at all, exact only when the engine computes the trainer's quantity
            (``VLLMEngine`` with ``logprobs_mode: trainer`` in float32); checked on the first
            micro-batch of every step, and the step falls back to ``reuse_first``, with a warning,
            when they differ from the trainer's by more than ``engine_logprob_tolerance``.
        fused_optimizer: torch's fused AdamW kernel where the device supports it (not under
            DeepSpeed); the same update up to float rounding, faster on CPU (docs/benchmarks.md).
        engine_logprob_tolerance: largest mean |log pi_trainer - log pi_engine| per token (nats)
            for which ``engine`` uses the engine's log-probs.
        lora: ``{r, alpha, dropout, target_modules}`` to train LoRA adapters through peft instead of
            the full weights (``lite_ppo.models.lora``): the base is frozen and only the adapters are
            in the optimizer; ``KLPenalty`` then scores its reference with the adapters off (no
            second copy). ``None`` (default): full fine-tuning. Checked before any weights load.

    Example (``lite-ppo fit`` config)::

        model: {model_path: builtin:tiny, lr: 1.0e-6, num_mini_batches: 4}
    """

    def __init__(
        self,
        model_path: str = "builtin:tiny",
        lr: float = 1e-6,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_steps: int = 0,
        lr_schedule: Literal["constant", "cosine"] = "constant",
        min_lr_ratio: float = 0.1,
        max_grad_norm: float | None = 1.0,
        clip_eps: float = 0.2,
        num_mini_batches: int = 4,
        mini_batch_split: Literal["row", "group"] = "row",
        micro_batch_size: int = 8,
        micro_batch_tokens: int | None = None,
        pack_prompts: bool = True,
        logprob_chunk_size: int | None = 1024,
        torch_dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        gradient_checkpointing: bool = False,
        old_logprobs: Literal["reuse_first", "recompute", "engine"] = "reuse_first",
        engine_logprob_tolerance: float = 1e-3,
        fused_optimizer: bool = True,
        lora: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        check_module_arguments(  # the values alone, at construction (lite_ppo.training.preflight)
            num_mini_batches, micro_batch_size, micro_batch_tokens, logprob_chunk_size, mini_batch_split, old_logprobs
        )
        self.lora = LoraSettings.from_config(lora)  # its values refused here, its targets before the weights load
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.model_path = model_path
        self.policy: torch.nn.Module | None = None
        self.tokenizer = None
        self.policy_version = 0  # bumped after every optimizer step; engines sync when it changes
        self.phase: tuple[str, int, int] | None = None  # what the step is doing now (see report_phase)
        self.loss_config = PolicyLossConfig(clip_low=clip_eps, clip_high=clip_eps)
        self.step_metrics = StepMetrics()  # this training step's scalars, the techniques' included
        # Each step's old log-probs: model.old_logprobs, or recompute when a technique needs them all up front.
        self.old_logprob_policy = OldLogprobPolicy(old_logprobs, engine_logprob_tolerance, rank_zero_warn)
        self._hf_zero3_token = None  # keeps transformers' ZeRO-3 flag alive as long as the policy (configure_model)
        self._sources = SourceSlot()  # the rollout callback registers here at setup
        # Found once per fit, at setup: the techniques (callback order) and the divergence guard.
        self._techniques: list[Technique] = []
        self.divergence_guard = divergence_guard_of(None)
        self.scorer = PolicyScorer(self)  # forward passes over responses: the update's, old log-probs', techniques'
        self.checkpoint_contents = CheckpointContents(self)  # what a checkpoint holds beside Lightning's state

    # -- model -------------------------------------------------------------------------------------
    def use_rollout_source(self, source: RolloutSource) -> None:
        """Called by the rollout callback in its ``setup`` hook: ``source`` produces this trainer's
        rollouts (``lite_ppo.training.rollout_source``). Two sources in one trainer are refused."""
        self._sources.register(self._trainer, source)

    @property
    def rollout_source(self) -> RolloutSource:
        """This trainer's source of rollouts; a one-line error when no callback registered one."""
        return self._sources.source(self._trainer)

    def setup(self, stage: str) -> None:
        # Lightning calls this after the callbacks' setup (the rollout source has registered) and
        # before configure_model: refuse settings that cannot work while no weights have loaded
        # yet (lite_ppo.training.preflight says what is checked).
        self.rollout_source  # noqa: B018  (a run without a rollout callback stops here, not at step 1)
        self._techniques = techniques_of(self.trainer)
        self.divergence_guard = divergence_guard_of(self.trainer)  # skips non-finite optimizer steps, or a no-op
        # The rollout settings, resolved once by their owner and handed to every callback that
        # declares configure_run (every technique, the evaluation), so none looks up another.
        settings = self._sources.settings()  # None for a source without them (a test's fixed batches)
        if settings is not None:
            for callback in self.trainer.callbacks:
                if isinstance(callback, SettingsListener):
                    callback.configure_run(settings)
        if stage == "fit":
            check_fit_settings(self.trainer, self, self._techniques)
            # A repeated or conflicting technique, a misspelt hook, no or two advantage estimators: one
            # line naming the techniques, before the weights load.
            self._estimator = check_techniques(self._techniques)

    def configure_model(self) -> None:
        if self.policy is not None:
            return
        path = resolve_model(self.hparams.model_path)
        if self.lora is not None:  # from the config alone: a misspelt module fails before the weights load
            self.lora.check_targets(self.hparams.model_path)
        self.model_path = path
        self.tokenizer = load_tokenizer(path)
        # Under ZeRO-3 (Lightning runs this inside deepspeed.zero.Init) transformers must know, so it
        # loads the checkpoint into the partitioned parameters and generates with synced_gpus.
        with hf_zero3_loading(self._trainer) as zero3_token:
            self.policy = load_causal_lm(path, self.hparams.torch_dtype)
        # transformers' ZeRO-3 flag lasts while this token does (a weak reference): keep it as long
        # as the policy, which is used after fit too (validate, test, generation); None elsewhere.
        self._hf_zero3_token = zero3_token
        self.policy.config.use_cache = False
        if self.lora is not None:
            self.policy = self.lora.wrap(self.policy)  # base frozen, adapters trainable
        # from_pretrained returns eval mode; train mode matters for gradient checkpointing. The
        # supported causal LMs (Llama, Qwen, SmolLM2) have no dropout, so old and new log-probs agree.
        self.policy.train()
        if self.hparams.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable()

    def load_frozen_model(self, path: str) -> torch.nn.Module:
        """A frozen, eval-mode causal LM from ``path`` in the policy's dtype, laid out like the policy
        (under ZeRO-3 partitioned like it), for a technique that scores with a second model
        (``lite_ppo.training.frozen_model``)."""
        return load_frozen_model(path, self.hparams.torch_dtype, self._trainer, self.device)

    @property
    def has_adapters(self) -> bool:
        """Whether the policy trains LoRA adapters on a frozen base (``model.lora``)."""
        return self.policy is not None and is_lora_model(self.policy)

    def adapters_disabled(self):
        """A context in which the policy computes its frozen base model (the adapters off), for a
        reference policy without a second copy; a no-op context without adapters."""
        return self.policy.disable_adapter() if self.has_adapters else contextlib.nullcontext()

    def configure_optimizers(self):
        set_gradient_clipping(self._trainer, self.hparams.max_grad_norm)  # DeepSpeed clips inside step()
        optimizer = adamw_class(self._trainer, fused=self.hparams.fused_optimizer)(
            # All of them under full fine-tuning; the adapters only with LoRA (no state for frozen weights).
            [p for p in self.policy.parameters() if p.requires_grad],
            lr=self.hparams.lr,
            betas=tuple(self.hparams.betas),
            weight_decay=self.hparams.weight_decay,
        )
        total = planned_optimizer_steps(self._trainer, self.hparams.num_mini_batches)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(self.hparams.warmup_steps, self.hparams.lr_schedule, total, self.hparams.min_lr_ratio)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_fit_start(self) -> None:
        # A checkpoint holds the weights after its step's updates, which is what a resume continues from:
        # Lightning's advice to save the pre-optimization state under manual optimization does not apply.
        warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
        # Built here, after a resume restored the techniques' states (setup only checked that it builds).
        self.loss_config = build_loss_config(
            PolicyLossConfig(clip_low=self.hparams.clip_eps, clip_high=self.hparams.clip_eps), self._techniques
        )
        objective = policy_objective(self.loss_config.objective)
        if objective.aggregation is not None and objective.aggregation != self.loss_config.aggregation:
            rank_zero_warn(
                f"the {objective.name!r} policy objective is defined with the {objective.aggregation!r} loss "
                f"aggregation, this run uses {self.loss_config.aggregation!r} (set it with LossAggregation)"
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.checkpoint_contents.save(checkpoint)  # lite_ppo.training.checkpoint_contents

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.checkpoint_contents.load(checkpoint)

    # -- one training step -------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, RolloutBatch]:
        """One RL step, in the order of the hook contract (``lite_ppo.technique``); returns the final
        batch as the step's ``outputs``."""
        techniques, ctx = self._techniques, self.step_context()
        # 1. Rollout: generated, scored, shaped, filtered and refilled by the rollout source.
        rollout = self.rollout_source.training_rollout(self.trainer, self, batch, batch_idx)
        # 2. Advantages, from the one estimator.
        rollout = replace(rollout, advantages=self._advantages(ctx, rollout))
        # 3. Loss masks (they multiply).
        masks = [t.loss_mask(ctx, rollout) for t in techniques]
        rollout = replace(rollout, loss_mask=multiply_factors(rollout.loss_mask, masks))
        # 4. Old log-probs: those known before the update (pi_old's entropy from the same pass when a
        #    technique needs it); with all of them known, token weights and the policy mask.
        start = time.perf_counter()
        old = self._old_logprobs(rollout, techniques)
        self.report_phase("old log-probs")
        known, old_entropy = old.before_update(with_entropy=any(t.needs_old_entropy for t in techniques))
        rollout = replace(rollout, old_logprobs=known, old_entropy=old_entropy)
        old_logprob_s = time.perf_counter() - start
        if old.source == "recompute":
            weights = [t.token_weights(ctx, rollout) for t in techniques]
            rollout = replace(rollout, token_weights=multiply_factors(rollout.token_weights, weights))
            selections = [t.policy_mask(ctx, rollout) for t in techniques]
            rollout = replace(rollout, policy_mask=multiply_factors(rollout.policy_mask, selections))
            for technique in techniques:
                technique.before_update(ctx, rollout)
        # 5. The update: num_mini_batches optimizer steps (lite_ppo.training.update).
        start = time.perf_counter()
        ppo_update(self, rollout, techniques, ctx, old)
        rollout = replace(rollout, old_logprobs=old.values)  # complete now that the first optimizer step ran
        update_s = time.perf_counter() - start - old.seconds_in_update
        old_logprob_s += old.seconds_in_update
        # 6. Statistics: every old log-prob shown to the techniques; the step's scalars reduced once over
        #    micro-batches and ranks, shown to the techniques, logged.
        for technique in techniques:
            technique.observe_old_logprobs(ctx, rollout)
        step_statistics(ctx.metrics, rollout, old_logprob_s, update_s)
        scalars = ctx.metrics.compute(Ranks(self._trainer))
        stats = update_stats(scalars)
        for technique in techniques:
            technique.on_update_end(ctx, rollout, stats)
        for prog_bar in (False, True):
            part = {k: v for k, v in scalars.items() if (k in LIVE) == prog_bar}
            self.log_dict(part, on_step=True, on_epoch=False, batch_size=rollout.num_responses, prog_bar=prog_bar)
        self.report_phase(None)
        return step_outputs(rollout)

    def _advantages(self, ctx: StepContext, rollout: RolloutBatch) -> torch.Tensor:
        """The estimator's advantages, float32, [B] (or [B, R] with ``per_token_advantages``)."""
        advantages = self._estimator.compute_advantages(ctx, rollout).to(torch.float32)
        per_token = self._estimator.per_token_advantages
        expected = tuple(rollout.response_mask.shape) if per_token else (rollout.num_responses,)
        if tuple(advantages.shape) != expected:
            raise RuntimeError(
                f"{type(self._estimator).__name__}.compute_advantages returned shape {tuple(advantages.shape)}, "
                f"expected {expected} (per_token_advantages={per_token})"
            )
        return advantages

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """The validation batch generated and scored by the rollout source, returned as the
        ``outputs`` that the ``Evaluation`` callback turns into metrics."""
        source = self.rollout_source
        if not isinstance(source, ValidationRolloutSource):
            raise UserError(f"{type(source).__name__} cannot generate validation batches (no validation_rollout)")
        return step_outputs(source.validation_rollout(self.trainer, self, batch, batch_idx))

    # -- pieces --------------------------------------------------------------------------------------
    def step_context(self) -> StepContext:
        """What this step's technique hooks receive first: the trainer, this module, the step's
        metrics and the run's rollout settings (``lite_ppo.step_context``)."""
        return StepContext(self._trainer, self, self.step_metrics, self._sources.settings(), tuple(self._techniques))

    def report_phase(self, phase: str | None, done: int = 0, total: int = 0) -> None:
        """Say what the training step is doing now (``"generating"``, ``"updating"`` 2 of 4, ...;
        None when the step is over): every :class:`~lite_ppo.policy_module.PhaseListener` callback
        (every technique, the console) is called and reads :attr:`phase`."""
        self.phase = (phase, done, total) if phase is not None else None
        if self._trainer is None:
            return
        for callback in self._trainer.callbacks:
            if isinstance(callback, PhaseListener):
                callback.on_phase(self._trainer, self)

    def mini_batches(self, rollout: RolloutBatch) -> list[torch.Tensor]:
        """Row indices of each mini-batch (``model.mini_batch_split``, see ``ops.mini_batch_rows``).

        Strided (by group or by row) rather than contiguous so that, when every rank holds an equal
        contiguous share of the global batch, the union over ranks of each rank's mini-batch j is
        exactly mini-batch j of a single-process run on the whole batch.
        """
        return mini_batch_rows(rollout.group_ids.cpu(), self.hparams.num_mini_batches, self.hparams.mini_batch_split)

    def _old_logprobs(self, rollout: RolloutBatch, techniques: list[Technique]) -> OldLogprobs:
        """This step's old log-probs (``lite_ppo.training.old_logprobs``)."""
        return self.old_logprob_policy.for_step(
            rollout,
            needs_all_up_front=any(needs_old_logprobs_up_front(t) for t in techniques),
            later_rows=torch.cat(self.mini_batches(rollout)[1:]) if self.hparams.num_mini_batches > 1 else None,
            score=self.scorer.score_without_gradient,
            global_sum=Ranks(self._trainer).sum,
            metrics=self.step_metrics,
        )

    # -- scoring (lite_ppo.training.policy_scorer; techniques call these) ------------------------------
    def forward_logits(self, batch: RolloutBatch, model: torch.nn.Module | None = None) -> torch.Tensor:
        """Logits [b, R, V] of each response token at the sampling temperature (:class:`PolicyScorer`)."""
        return self.scorer.forward_logits(batch, model)

    def score_responses(
        self, batch: RolloutBatch, model: torch.nn.Module | None = None, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprobs, entropy)`` [b, R] of the response tokens, gradients when enabled (:class:`PolicyScorer`)."""
        return self.scorer.score_responses(batch, model, with_entropy)

    def sequence_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """log pi(o_t | x, o_<t) [B, R] with the current policy, no gradient (:class:`PolicyScorer`)."""
        return self.scorer.sequence_logprobs(batch)

    def micro_batch_rows(self, batch: RolloutBatch) -> list[torch.Tensor]:
        """Row indices of each forward pass over ``batch`` (:class:`PolicyScorer`)."""
        return self.scorer.micro_batch_rows(batch)

    def packs_prompts(self, model: torch.nn.Module | None = None) -> bool:
        return self.scorer.packs_prompts(model)
