"""The LightningModule: the policy and one critic-free PPO update over a rollout batch."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from transformers import AutoModelForCausalLM, AutoTokenizer

from lite_ppo import metric_names as names
from lite_ppo.hooks import MiniBatchContext, PolicyLossConfig, Technique, advantage_estimator, build_loss_config, techniques_of
from lite_ppo.models import resolve_model
from lite_ppo.ops import aggregate_loss, aggregation_denominator, clip_fractions, clipped_surrogate, entropy_from_logits, logprobs_from_logits
from lite_ppo.errors import UserError
from lite_ppo.preflight import check_fit_settings
from lite_ppo.reliability.divergence import divergence_guard_of
from lite_ppo.resume import check_resume, format_differences
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.strategies.zero import adamw_class, begin_micro_batch, deepspeed_engine, engine_grad_norm, hf_zero3_loading, set_gradient_clipping


class LitePPO(LightningModule):
    """Critic-free PPO on a Hugging Face causal LM (the base algorithm of "Tricks or Traps?", Liu et al., 2025).

    One training step = one rollout batch (filled by the ``Rollout`` callback):

    1. advantages from the single advantage-estimator technique, then ``on_advantages`` hooks;
    2. old log-probs with the current policy, once, without gradient, then ``on_old_logprobs``;
    3. the batch split into ``num_mini_batches`` mini-batches (strided, see :meth:`mini_batches`),
       one optimizer step each (manual optimization), each accumulated over micro-batches of
       ``micro_batch_size`` responses: per-token ratio, clipped surrogate, aggregation with the
       denominator of the whole optimizer step over all ranks, plus techniques' extra terms;
    4. gradient clipping, optimizer and LR-scheduler step; scalars to the logger.

    Which techniques run is decided by the trainer's callbacks (see ``lite_ppo.hooks``); the module
    knows only the hook contract.

    Args:
        model_path: a local Hugging Face folder, or ``builtin:tiny`` / ``builtin:smollm2-135m-instruct``.
        lr: peak learning rate (paper: 1e-6).
        weight_decay, betas: AdamW settings.
        warmup_steps: optimizer steps of linear warm-up from 0 to ``lr``.
        lr_schedule: ``constant`` after warm-up, or ``cosine`` decay to ``min_lr_ratio * lr`` over the run.
        max_grad_norm: gradient clipping by global norm (``None`` disables clipping; the norm is logged anyway).
        clip_eps: the symmetric clip of the base algorithm; Clip-Higher techniques override either side.
        num_mini_batches: optimizer steps per rollout batch (each rank's batch divides into this many).
        micro_batch_size: responses per forward/backward pass (memory bound, no effect on the math).
        torch_dtype: dtype the policy is loaded in (``float32`` is safest for training on CPU;
            use ``precision: bf16-mixed`` in the trainer for speed).
        gradient_checkpointing: trade compute for activation memory.

    Example::

        model:
          class_path: lite_ppo.LitePPO
          init_args: {model_path: builtin:tiny, lr: 1.0e-6, num_mini_batches: 4}
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
        micro_batch_size: int = 8,
        torch_dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        if num_mini_batches < 1 or micro_batch_size < 1:
            raise UserError(f"model.num_mini_batches={num_mini_batches} and model.micro_batch_size={micro_batch_size}: both must be >= 1")
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.model_path = model_path
        self.policy: torch.nn.Module | None = None
        self.tokenizer = None
        self.policy_version = 0  # bumped after every optimizer step; engines sync when it changes
        self.phase: tuple[str, int, int] | None = None  # what the step is doing now (see report_phase)
        self.loss_config = PolicyLossConfig(clip_low=clip_eps, clip_high=clip_eps)

    # -- model -------------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        # Lightning calls this before configure_model: refuse settings that cannot work while no
        # weights have loaded yet (lite_ppo.preflight says what is checked).
        if stage == "fit":
            check_fit_settings(self.trainer, self)

    def configure_model(self) -> None:
        if self.policy is not None:
            return
        path = resolve_model(self.hparams.model_path)
        self.model_path = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # Under ZeRO-3 (Lightning runs this inside deepspeed.zero.Init) transformers must know, so it
        # loads the checkpoint into the partitioned parameters and generates with synced_gpus.
        with hf_zero3_loading(self._trainer) as zero3_token:
            self.policy = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.hparams.torch_dtype))
        self.policy._lite_ppo_zero3 = zero3_token  # keeps transformers' ZeRO-3 flag alive with the policy
        self.policy.config.use_cache = False
        # from_pretrained returns eval mode; train mode matters for gradient checkpointing. The
        # supported causal LMs (Llama, Qwen, SmolLM2) have no dropout, so old and new log-probs agree.
        self.policy.train()
        if self.hparams.gradient_checkpointing:
            self.policy.gradient_checkpointing_enable()

    def configure_optimizers(self):
        set_gradient_clipping(self._trainer, self.hparams.max_grad_norm)  # DeepSpeed clips inside step()
        optimizer = adamw_class(self._trainer)(self.policy.parameters(), lr=self.hparams.lr, betas=tuple(self.hparams.betas), weight_decay=self.hparams.weight_decay)
        total = _planned_optimizer_steps(self._trainer, self.hparams.num_mini_batches)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(self.hparams.warmup_steps, self.hparams.lr_schedule, total, self.hparams.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_fit_start(self) -> None:
        techniques = techniques_of(self.trainer)
        # Fail at start, naming the techniques, rather than at the first step.
        self._estimator = advantage_estimator(techniques)
        self.loss_config = build_loss_config(PolicyLossConfig(clip_low=self.hparams.clip_eps, clip_high=self.hparams.clip_eps), techniques)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["policy_version"] = self.policy_version

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.policy_version = checkpoint.get("policy_version", 0)
        saved = checkpoint.get("hyper_parameters")
        if saved and self._trainer is not None and self._trainer.state.fn == "fit":
            # Changed model.* settings are applied where safe, else refused, never dropped (lite_ppo.resume).
            applied = check_resume(saved, dict(self.hparams), str(self._trainer.ckpt_path))
            if applied:
                rank_zero_info(f"resuming with changed settings (applied): {format_differences(applied)}")

    # -- one training step -------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        rollout: RolloutBatch | None = batch.get("rollout") if isinstance(batch, dict) else None
        if rollout is None:
            raise RuntimeError("the batch carries no rollout: add `lite_ppo.callbacks.Rollout` under trainer.callbacks")
        techniques = techniques_of(self.trainer)
        rollout.advantages = self._estimator.compute_advantages(self.trainer, self, rollout).to(torch.float32)
        for technique in techniques:
            technique.on_advantages(self.trainer, self, rollout)

        start = time.perf_counter()
        self.report_phase("old log-probs")
        rollout.old_logprobs = self.sequence_logprobs(rollout)
        old_logprob_s = time.perf_counter() - start
        for technique in techniques:
            technique.on_old_logprobs(self.trainer, self, rollout)

        start = time.perf_counter()
        stats = self.ppo_update(rollout, techniques)
        train_s = time.perf_counter() - start

        stats["time/old_logprobs_s"] = torch.tensor(old_logprob_s)
        stats[names.UPDATE_SECONDS] = torch.tensor(train_s)
        stats["time/update_tokens_per_s"] = rollout.attention_mask.sum().float().cpu() / max(train_s, 1e-9)
        nonzero = self._global_sum(torch.stack([(rollout.advantages.abs() > 1e-8).float().sum(), rollout.advantages.new_tensor(float(rollout.num_responses))]))
        stats[names.ADVANTAGE_NONZERO] = nonzero[0] / nonzero[1].clamp(min=1)
        for technique in techniques:
            technique.on_update_end(self.trainer, self, rollout, stats)
        live = {names.APPROX_KL, names.CLIP_FRACTION}  # shown in the progress bar too
        for prog_bar in (False, True):
            part = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in stats.items() if (k in live) == prog_bar}
            self.log_dict(part, on_step=True, on_epoch=False, batch_size=rollout.num_responses, prog_bar=prog_bar)
        self.report_phase(None)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """Nothing to compute here: the ``Rollout`` callback generates and scores the validation
        batch (``batch["rollout"]``) and the ``Evaluation`` callback turns it into metrics."""
        if batch.get("rollout") is None:
            raise RuntimeError("the validation batch carries no rollout: add `lite_ppo.callbacks.Rollout` under trainer.callbacks")

    # -- pieces --------------------------------------------------------------------------------------
    def report_phase(self, phase: str | None, done: int = 0, total: int = 0) -> None:
        """Say what the training step is doing now (``"generating"``, ``"updating"`` 2 of 4, ...;
        None when the step is over). Callbacks that display progress define ``on_phase(trainer,
        module)`` and read :attr:`phase`; the module knows none of them."""
        self.phase = (phase, done, total) if phase is not None else None
        if self._trainer is None:
            return
        for callback in self._trainer.callbacks:
            on_phase = getattr(callback, "on_phase", None)
            if callable(on_phase):
                on_phase(self._trainer, self)

    def mini_batches(self, num_responses: int) -> list[torch.Tensor]:
        """Row indices of each mini-batch: row i goes to mini-batch ``i % num_mini_batches``.

        Strided rather than contiguous so that, when every rank holds an equal contiguous share of
        the global batch (a multiple of ``num_mini_batches`` rows), the union over ranks of each
        rank's mini-batch j is exactly mini-batch j of a single-process run on the whole batch.
        """
        m = self.hparams.num_mini_batches
        if num_responses % m:
            raise ValueError(f"the rollout batch has {num_responses} responses, not divisible by num_mini_batches={m}")
        return [torch.arange(j, num_responses, m) for j in range(m)]

    def forward_logits(self, batch: RolloutBatch, model: torch.nn.Module | None = None) -> torch.Tensor:
        """Logits [b, R, V] predicting each response token, divided by the sampling temperature.

        ``model`` defaults to the policy; techniques pass another one (a KL reference) so that both
        see exactly the same positions and temperature.
        """
        width = batch.response_mask.shape[1]
        # Left-padded prompts: positions count real tokens only, as generate() did.
        position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = (model or self.policy)(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids, use_cache=False, logits_to_keep=width + 1)
        return out.logits[:, :-1].float() / batch.temperature

    @torch.no_grad()
    def sequence_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """log pi(o_t | x, o_<t) of the response tokens with the current policy, no gradient: [B, R]."""
        parts = []
        for idx in torch.arange(batch.num_responses).split(self.hparams.micro_batch_size):
            micro = batch.select(idx)
            parts.append(logprobs_from_logits(self.forward_logits(micro), micro.response_ids) * micro.response_mask)
        return torch.cat(parts)

    def ppo_update(self, rollout: RolloutBatch, techniques: list[Technique]) -> dict[str, torch.Tensor]:
        optimizer = self.optimizers()
        scheduler = self.lr_schedulers()
        cfg = self.loss_config
        world = self.trainer.world_size
        acc = _StepAccumulator()
        grad_norms = []
        guard = divergence_guard_of(self.trainer)  # skips optimizer steps with a non-finite loss or grad norm
        mini_batches = self.mini_batches(rollout.num_responses)
        for k, mb_idx in enumerate(mini_batches):
            self.report_phase("updating", k + 1, len(mini_batches))
            mini = rollout.select(mb_idx)
            # The denominator of the whole optimizer step: all micro-batches, all ranks.
            denominator = self._global_sum(aggregation_denominator(mini.loss_mask, cfg.aggregation))
            optimizer.zero_grad()
            micro_rows = torch.arange(mini.num_responses).split(self.hparams.micro_batch_size)
            for micro_idx, idx in enumerate(micro_rows):
                micro = mini.select(idx)
                # DDP: all-reduce the summed gradient once, at the step's last micro-batch.
                sync = contextlib.nullcontext() if micro_idx == len(micro_rows) - 1 else self._no_gradient_sync()
                begin_micro_batch(self._trainer)  # DeepSpeed: accumulate, not overwrite, this micro-batch's gradient
                logits = self.forward_logits(micro)
                logprobs = logprobs_from_logits(logits, micro.response_ids)
                token_loss, ratio = clipped_surrogate(logprobs, micro.old_logprobs, micro.advantages, cfg.clip_low, cfg.clip_high, cfg.dual_clip)
                if micro.token_weights is not None:
                    token_loss = token_loss * micro.token_weights
                policy_loss = aggregate_loss(token_loss, micro.loss_mask, cfg.aggregation, denominator)
                loss = policy_loss
                ctx = MiniBatchContext(batch=micro, logprobs=logprobs, logits=logits)
                for technique in techniques:
                    for name, term in technique.extra_loss_terms(self.trainer, self, ctx).items():
                        term_loss = aggregate_loss(term, micro.loss_mask, cfg.aggregation, denominator)
                        loss = loss + term_loss
                        acc.add(f"loss/{name}", term_loss)
                # DDP and DeepSpeed average gradients over ranks; the loss is already a global mean.
                with sync:
                    self.manual_backward(loss * world)
                self._micro_stats(acc, micro, logits, logprobs, ratio)
                acc.add(names.POLICY_LOSS, policy_loss)
                if loss is not policy_loss:  # a technique added terms: the optimized loss differs from the surrogate
                    acc.add(names.TOTAL_LOSS, loss)
                guard.observe_loss(loss)
            grad_norm = self._clip_gradients(optimizer)
            guard.before_optimizer_step(self.trainer, optimizer, grad_norm)  # non-finite: grads dropped, step() changes nothing
            optimizer.step()
            grad_norms.append(grad_norm if grad_norm is not None else engine_grad_norm(self._trainer))
            scheduler.step()
            self.policy_version += 1

        return self._finish_stats(acc, grad_norms, optimizer)

    @torch.no_grad()
    def _micro_stats(self, acc: "_StepAccumulator", micro: RolloutBatch, logits: torch.Tensor, logprobs: torch.Tensor, ratio: torch.Tensor) -> None:
        """Token-weighted sums (divided by the global token count in ``_finish_stats``) and extrema."""
        mask = micro.loss_mask
        cfg = self.loss_config
        n = mask.sum()
        # Clipped-token counts (fractions x n), and the A > 0 / A < 0 token counts they are shares of.
        clipped = clip_fractions(ratio, micro.advantages, mask, cfg.clip_low, cfg.clip_high, cfg.dual_clip)
        for name in ("upper", "lower", "dual"):
            acc.add(f"_clipped_{name}", clipped[name] * n)
        advantages = micro.advantages.unsqueeze(-1).expand_as(mask)
        acc.add("_positive_tokens", ((advantages > 0) * mask).sum())
        acc.add("_negative_tokens", ((advantages < 0) * mask).sum())
        log_ratio = (logprobs - micro.old_logprobs) * mask
        acc.add(names.ENTROPY, (entropy_from_logits(logits) * mask).sum())
        # k3 estimator of KL(pi_old || pi_theta): E_old[(rho - 1) - log rho] (Schulman 2020), >= 0.
        acc.add(names.APPROX_KL, (((ratio - 1) * mask) - log_ratio).sum())
        acc.add("_tokens", n)
        if n > 0:
            acc.extremum("policy/ratio_max", ratio[mask > 0].max())
            acc.extremum("policy/ratio_min", -ratio[mask > 0].min())

    def _finish_stats(self, acc: "_StepAccumulator", grad_norms: list[torch.Tensor], optimizer) -> dict[str, torch.Tensor]:
        keys = sorted(acc.sums)
        total = dict(zip(keys, self._global_sum(torch.stack([acc.sums[k] for k in keys]))))
        tokens = total.pop("_tokens").clamp(min=1)
        positive, negative = total.pop("_positive_tokens"), total.pop("_negative_tokens")
        upper, lower, dual = total.pop("_clipped_upper"), total.pop("_clipped_lower"), total.pop("_clipped_dual")
        stats: dict[str, torch.Tensor] = {
            names.CLIP_FRACTION: (upper + lower) / tokens,
            names.CLIP_UPPER_POSITIVE: upper / positive.clamp(min=1),
            names.CLIP_LOWER_NEGATIVE: lower / negative.clamp(min=1),
        }
        if self.loss_config.dual_clip is not None:
            stats[names.CLIP_DUAL_NEGATIVE] = dual / negative.clamp(min=1)
        for name, value in total.items():
            # Losses were summed over mini-batches (each a global mean): report the mean step loss.
            stats[name] = value / self.hparams.num_mini_batches if name.startswith("loss/") else value / tokens
        for name, value in acc.maxima.items():
            best = self._global_max(value)
            stats[name] = -best if name.endswith("_min") else best
        stats[names.GRAD_NORM] = torch.stack(grad_norms).mean()
        stats[names.LEARNING_RATE] = torch.tensor(optimizer.param_groups[0]["lr"])
        return stats

    def _clip_gradients(self, optimizer) -> torch.Tensor | None:
        """Clip and return the pre-clip global norm; None under DeepSpeed, which clips inside
        ``step()`` (config ``gradient_clipping`` = ``max_grad_norm``) and reports the norm after it."""
        if deepspeed_engine(self._trainer) is not None:
            return None
        max_norm = self.hparams.max_grad_norm
        params = [p for p in self.policy.parameters() if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm is not None else math.inf).detach().float().cpu()

    def _no_gradient_sync(self):
        """DDP's ``no_sync`` through Lightning: this backward accumulates locally, no all-reduce.

        DDP's reducer all-reduces the accumulated ``.grad`` at the next synced backward, so the
        step's gradient is unchanged. A no-op for one process and for DeepSpeed (ZeRO reduces each
        micro-batch's gradient partition itself; its ``no_sync`` refuses ZeRO-3).
        """
        strategy = self.trainer.strategy
        if isinstance(strategy.model, torch.nn.parallel.DistributedDataParallel):  # not DeepSpeed's engine: its no_sync refuses ZeRO-3
            return strategy.block_backward_sync()
        return contextlib.nullcontext()

    def _global_sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.trainer.world_size <= 1:
            return value
        return self.trainer.strategy.reduce(value.clone(), reduce_op="sum")

    def _global_max(self, value: torch.Tensor) -> torch.Tensor:
        return value if self.trainer.world_size <= 1 else self.all_gather(value).max()


class _StepAccumulator:
    """Sums and maxima collected over the micro-batches of one training step (detached, float)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.maxima: dict[str, torch.Tensor] = {}

    def add(self, name: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        self.sums[name] = self.sums[name] + value if name in self.sums else value

    def extremum(self, name: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        self.maxima[name] = torch.maximum(self.maxima[name], value) if name in self.maxima else value


def _planned_optimizer_steps(trainer, num_mini_batches: int) -> int | float:
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


def _lr_lambda(warmup_steps: int, schedule: str, total_steps: int, min_ratio: float):
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
