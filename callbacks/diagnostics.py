"""Diagnostics: the training-state measurements the paper says technique choices should follow,
and the TensorBoard layout and hyper-parameters that present them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from typing_extensions import override

from lite_ppo import metric_names as names
from lite_ppo.ops.correlation import pearson_correlation
from lite_ppo.ops.group_outcomes import group_outcome_shares
from lite_ppo.ops.repetition import repetition_shares
from lite_ppo.rewards import STATUSES
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique, UpdateStats

CORRECT = "correct"  # the verifier status of a right answer (lite_ppo.rewards.STATUSES)


class Diagnostics(Technique):
    """Logs the training-state measurements that technique choices follow, every training step.

    The measurements the paper says technique choices should follow, overall and per difficulty
    tier (``extras["tier"]``). It changes nothing in the batch. The tags and their meanings are
    documented in one place, :data:`lite_ppo.metric_names.SCALARS` (docs/tensorboard.md's table is rendered
    from it).

    Two views of one step:

    - **Generation** (``reward/*``, ``groups/*``, ``prompt/*``, ``response/*``, ``tier/<t>/*``
      except the two update-side ones): every response generated for the step, so with dynamic
      sampling all refill rounds and the dropped groups count: this is how the policy behaves.
      Correctness is the verifier's verdict, ``RolloutBatch.correct``, which reward shaping does not
      change. ``reward/mean`` and ``reward/std`` are the rewards after every technique's
      ``shape_rewards`` term, whatever the order of the callbacks (``on_rollout`` runs after all
      of them).
    - **Update** (``update/*``, ``tier/<t>/advantage_nonzero_share``,
      ``tier/<t>/share_of_loss_tokens``): the batch the optimizer saw, read in ``on_update_end``,
      after advantages and loss masks. The module logs the token-level ones itself (``clip/*``,
      ``policy/*``, ``loss/*``, ``update/grad_norm``, ...).

    ``tier/<t>/*`` is logged only on steps whose responses span two or more tiers (with one tier it
    would repeat the global values). Every value is global (all data-parallel ranks).

    At fit start, with a TensorBoard logger, it also writes the custom-scalars layout (the CUSTOM
    SCALARS tab: the paper's key panels, one quantity per chart, with a category per training tier
    and the charts of the techniques in the run: :func:`lite_ppo.metric_names.custom_scalars_layout`) and
    the run's hyper-parameters (model, data and technique settings) for the HPARAMS tab, with
    :func:`~lite_ppo.metric_names.hparam_metrics` as its metric columns.

    Repetition (``response/repetition_rate_*``): over the last ``repetition_window`` tokens, the
    share of ``ngram``-gram positions repeating an earlier n-gram of that span
    (:mod:`lite_ppo.ops.repetition`); a response is repetitive when the share is
    >= ``repetition_threshold``. 0 when there are no such responses.

    Args:
        per_tier: log the ``tier/<t>/*`` breakdown.
        histograms: write length histograms when the logger is TensorBoard (``response/length``,
            ``groups/correct_per_group``, ``tier/<t>/length``).
        ngram: the n of the repeated n-grams of the repetition rate (above).
        repetition_window: the last this many tokens of a response are checked (null: the whole response).
        repetition_threshold: a response is repetitive when this share of its n-gram positions repeats.
        layout: write the custom-scalars layout and the hyper-parameters at fit start.

    Example (on by default through the CLI's ``diagnostics:`` section; standalone)::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.Diagnostics
              init_args: {ngram: 4, repetition_window: 256, repetition_threshold: 0.5}
    """

    def __init__(
        self,
        per_tier: bool = True,
        histograms: bool = True,
        ngram: int = 4,
        repetition_window: int | None = 256,
        repetition_threshold: float = 0.5,
        layout: bool = True,
    ) -> None:
        if ngram < 1:
            raise ValueError(f"Diagnostics.ngram must be >= 1, got {ngram}")
        if repetition_window is not None and repetition_window < 1:
            raise ValueError(f"Diagnostics.repetition_window must be >= 1 or null, got {repetition_window}")
        if not 0 < repetition_threshold <= 1:
            raise ValueError(f"Diagnostics.repetition_threshold must be in (0, 1], got {repetition_threshold}")
        self.per_tier = per_tier
        self.histograms = histograms
        self.ngram = ngram
        self.repetition_window = repetition_window
        self.repetition_threshold = repetition_threshold
        self.layout = layout
        self._generated: list[RolloutBatch] = []

    # -- hooks -----------------------------------------------------------------------------------
    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.layout and trainer.global_rank == 0:
            tiers, held_out, benchmarks = _evaluated(trainer)
            techniques = pl_module.step_context().techniques  # the run's, found once by the module
            classes = [type(technique).__name__ for technique in techniques]
            for writer in _tensorboard_writers(trainer):
                writer.add_custom_scalars(names.custom_scalars_layout(tiers, classes, benchmarks, held_out))
                _write_hparams(
                    writer, run_hparams(trainer, pl_module, techniques), names.hparam_metrics(held_out, benchmarks)
                )

    @override
    def on_rollout(self, ctx: StepContext, batch: RolloutBatch) -> None:
        self._generated.append(self.generation_record(batch))  # rewards already shaped by every technique

    @override
    def on_update_end(self, ctx: StepContext, batch: RolloutBatch, stats: UpdateStats) -> None:
        generated = self._generated or [self.generation_record(batch)]
        self._generated = []
        ranks = ctx.ranks
        # Group ids restart in every record (refill round, rank): merge_records keeps them distinct.
        gen = merge_records([r for rank in ranks.objects(generated) for r in rank])
        upd = merge_records(ranks.objects(self.update_record(batch)))
        split_tiers = self.per_tier and len(_tier_rows(gen["tier"])) > 1
        metrics = self.generation_metrics(gen, split_tiers)
        metrics.update(self.update_metrics(upd, split_tiers))
        live = {names.REWARD_ACCURACY, names.RESPONSE_LENGTH}  # also shown in the progress bar
        size = max(batch.num_responses, 1)
        for prog_bar in (False, True):
            part = {k: torch.tensor(float(v)) for k, v in metrics.items() if (k in live) == prog_bar}
            ctx.module.log_dict(part, on_step=True, on_epoch=False, batch_size=size, prog_bar=prog_bar)
        if self.histograms:
            self._write_histograms(ctx.trainer, gen)

    # -- records (per-response rows, cheap to gather) ----------------------------------------------
    def generation_record(self, batch: RolloutBatch) -> dict[str, Any]:
        """The per-response facts of a generated batch that the generation metrics need."""
        rep = repetition_shares(batch.response_ids, batch.response_lengths, self.ngram, self.repetition_window)
        n = batch.num_responses
        return {
            "reward": batch.rewards.detach().double().cpu(),
            "correct": batch.correct.detach().cpu().bool(),
            "length": batch.response_lengths.detach().cpu().long(),
            "prompt_length": batch.attention_mask[:, : batch.prompt_width].detach().sum(-1).cpu().long(),
            "truncated": batch.truncated.detach().cpu().bool(),
            "repetition": rep.double(),
            "group": batch.group_ids.detach().cpu().long(),
            "tier": list(batch.extras.get("tier", [None] * n)),
            "status": list(batch.reward_status) if batch.reward_status is not None else [None] * n,
        }

    def update_record(self, batch: RolloutBatch) -> dict[str, Any]:
        """The per-response facts of the trained batch that the update metrics need."""
        advantages = batch.advantages if batch.advantages is not None else torch.zeros(batch.num_responses)
        if advantages.dim() == 2:  # per-token advantages: each response's mean over its tokens
            mask = batch.response_mask.to(advantages.dtype)
            advantages = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return {
            "advantage": advantages.detach().double().cpu(),
            "length": batch.response_lengths.detach().cpu().long(),
            "loss_tokens": batch.loss_mask.detach().sum(-1).double().cpu(),
            "response_tokens": batch.response_mask.detach().sum(-1).double().cpu(),
            "group": batch.group_ids.detach().cpu().long(),
            "tier": list(batch.extras.get("tier", [None] * batch.num_responses)),
        }

    # -- metrics -----------------------------------------------------------------------------------
    def generation_metrics(self, rec: dict[str, Any], split_tiers: bool | None = None) -> dict[str, float]:
        """Scalars of the generated responses (see ``lite_ppo.metric_names.SCALARS``); the
        ``tier/<t>/*`` breakdown when ``split_tiers`` (None: when ``rec`` spans several tiers)."""
        s = self._generation_summary(rec)
        out: dict[str, float] = {
            names.REWARD_ACCURACY: s["accuracy"],
            names.REWARD_MEAN: s["reward_mean"],
            names.REWARD_STD: s["reward_std"],
            names.GROUPS_ALL_CORRECT: s["groups_all_correct"],
            names.GROUPS_ALL_WRONG: s["groups_all_wrong"],
            names.GROUPS_MIXED: s["groups_mixed"],
            names.PROMPT_LENGTH: s["prompt_length_mean"],
            "prompt/length_max": s["prompt_length_max"],
            names.RESPONSE_LENGTH: s["length_mean"],
            "response/length_max": s["length_max"],
            names.GENERATED_TOKENS: s["length_sum"],
            names.TRUNCATION_RATE: s["truncation_rate"],
            names.REPETITION_TRUNCATED: s["repetition_rate_truncated"],
            "response/repetition_rate_finished": s["repetition_rate_finished"],
        }
        # Steps without a correct (wrong) response have no point rather than a misleading 0.
        if s["length_mean_correct"] is not None:
            out[names.RESPONSE_LENGTH_CORRECT] = s["length_mean_correct"]
        if s["length_mean_wrong"] is not None:
            out[names.RESPONSE_LENGTH_WRONG] = s["length_mean_wrong"]
        statuses = [st for st in rec["status"] if st is not None]
        if statuses:  # the verifier's other verdicts (``correct`` is reward/accuracy)
            for status in STATUSES:
                if status != CORRECT:
                    out[names.reward_status_rate(status)] = sum(st == status for st in statuses) / len(statuses)
        tiers = _tier_rows(rec["tier"])
        if split_tiers if split_tiers is not None else (self.per_tier and len(tiers) > 1):
            n_groups = max(s["groups"], 1)
            for tier, idx in tiers.items():
                t = self._generation_summary(_select(rec, idx))
                out[names.tier_tag(tier, "share_of_prompts")] = t["groups"] / n_groups
                for k in (
                    "accuracy",
                    "length_mean",
                    "truncation_rate",
                    "repetition_rate_truncated",
                    "groups_all_correct",
                    "groups_all_wrong",
                    "groups_mixed",
                ):
                    out[names.tier_tag(tier, k)] = t[k]
        return out

    def _generation_summary(self, rec: dict[str, Any]) -> dict[str, Any]:
        reward, correct, length = rec["reward"], rec["correct"], rec["length"].double()
        truncated, rep, prompt = rec["truncated"], rec["repetition"], rec["prompt_length"].double()
        n = reward.numel()
        repetitive = rep >= self.repetition_threshold
        shares = (
            group_outcome_shares(correct.double(), rec["group"])
            if n
            else {"all_correct": 0.0, "all_wrong": 0.0, "mixed": 0.0}
        )
        return {
            "reward_mean": float(reward.mean()) if n else 0.0,
            "reward_std": float(reward.std()) if n > 1 else 0.0,
            "accuracy": float(correct.double().mean()) if n else 0.0,
            "groups_all_correct": float(shares["all_correct"]),
            "groups_all_wrong": float(shares["all_wrong"]),
            "groups_mixed": float(shares["mixed"]),
            "length_mean": float(length.mean()) if n else 0.0,
            "length_max": float(length.max()) if n else 0.0,
            "length_sum": float(length.sum()),
            "length_mean_correct": float(length[correct].mean()) if correct.any() else None,
            "length_mean_wrong": float(length[~correct].mean()) if (~correct).any() else None,
            "prompt_length_mean": float(prompt.mean()) if n else 0.0,
            "prompt_length_max": float(prompt.max()) if n else 0.0,
            "truncation_rate": float(truncated.double().mean()) if n else 0.0,
            "repetition_rate_truncated": _rate(repetitive, truncated),
            "repetition_rate_finished": _rate(repetitive, ~truncated),
            "groups": int(torch.unique(rec["group"]).numel()) if n else 0,
        }

    def update_metrics(self, rec: dict[str, Any], split_tiers: bool | None = None) -> dict[str, float]:
        """Scalars of the trained batch (the token-level ones are the module's); ``split_tiers`` as
        in :meth:`generation_metrics`."""
        adv, loss_tokens, resp_tokens = rec["advantage"], rec["loss_tokens"], rec["response_tokens"]
        n = adv.numel()
        total_loss_tokens = float(loss_tokens.sum())
        out = {
            names.ADVANTAGE_MEAN: float(adv.mean()) if n else 0.0,
            names.ADVANTAGE_STD: float(adv.std()) if n > 1 else 0.0,
            names.ADVANTAGE_MIN: float(adv.min()) if n else 0.0,
            names.ADVANTAGE_MAX: float(adv.max()) if n else 0.0,
            names.LENGTH_ADVANTAGE_CORR: float(pearson_correlation(rec["length"].double(), adv)),
            names.LOSS_TOKEN_FRACTION: total_loss_tokens / max(float(resp_tokens.sum()), 1.0),
        }
        tiers = _tier_rows(rec["tier"])
        if split_tiers if split_tiers is not None else (self.per_tier and len(tiers) > 1):
            for tier, idx in tiers.items():
                out[names.tier_tag(tier, "advantage_nonzero_share")] = float((adv[idx].abs() > 1e-8).double().mean())
                out[names.tier_tag(tier, "share_of_loss_tokens")] = float(loss_tokens[idx].sum()) / max(
                    total_loss_tokens, 1.0
                )
        return out

    def _write_histograms(self, trainer, rec: dict[str, Any]) -> None:
        if trainer is None or trainer.global_rank != 0 or rec["length"].numel() == 0:
            return
        writers = _tensorboard_writers(trainer)
        if not writers:
            return
        # The step Lightning logs this training step's scalars at (as LearningRateMonitor does).
        step = trainer.fit_loop.epoch_loop._batches_that_stepped
        tiers = _tier_rows(rec["tier"]) if self.per_tier else {}
        _, inverse = torch.unique(rec["group"], return_inverse=True)
        correct_per_group = torch.zeros(int(inverse.max()) + 1).index_add_(0, inverse, rec["correct"].float())
        for writer in writers:
            writer.add_histogram("response/length", rec["length"], step)
            writer.add_histogram("groups/correct_per_group", correct_per_group, step)
            if len(tiers) > 1:
                for tier, idx in tiers.items():
                    writer.add_histogram(f"tier/{tier}/length", rec["length"][idx], step)


# -- helpers ---------------------------------------------------------------------------------------
def merge_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate records, offsetting group ids so that groups of different records stay distinct."""
    out: dict[str, Any] = {}
    offset = 0
    for rec in records:
        for key, value in rec.items():
            if key == "group":
                value = value + offset
            if isinstance(value, torch.Tensor):
                out[key] = torch.cat([out[key], value]) if key in out else value
            else:
                out.setdefault(key, []).extend(value)
        if rec["group"].numel():
            offset += int(rec["group"].max()) + 1
    return out


def _select(rec: dict[str, Any], idx: torch.Tensor) -> dict[str, Any]:
    return {k: v[idx] if isinstance(v, torch.Tensor) else [v[i] for i in idx.tolist()] for k, v in rec.items()}


def _tier_rows(tiers: list) -> dict[str, torch.Tensor]:
    """Row indices of each tier (in first-seen order); empty when no response has a tier."""
    rows: dict[str, list[int]] = {}
    for i, tier in enumerate(tiers):
        if tier is not None:
            rows.setdefault(_tag_safe(str(tier)), []).append(i)
    return {t: torch.tensor(r, dtype=torch.long) for t, r in rows.items()}


def _tag_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "_"


def _rate(flags: torch.Tensor, among: torch.Tensor) -> float:
    return float(flags[among].double().mean()) if among.any() else 0.0


def _evaluated(trainer: Trainer) -> tuple[list[str], list[str], bool]:
    """The run's training tiers (the datamodule's sources), the tiers whose held-out accuracy it
    logs (none with ``val_size: 0`` or ``limit_val_batches: 0``: their charts would stay empty) and
    whether its validation includes any benchmark (sets given to the data module's
    ``configure_validation``, as the ``Evaluation`` callback does; else no average is logged)."""
    datamodule = getattr(trainer, "datamodule", None)
    tiers = list(getattr(datamodule, "sources", None) or {})
    validates = getattr(trainer, "limit_val_batches", 1) != 0
    held_out = tiers if validates and getattr(datamodule, "val_size", 1) else []
    benchmarks = validates and bool(getattr(datamodule, "validation_sets", None))
    return tiers, held_out, benchmarks


def _tensorboard_writers(trainer) -> list:
    """The SummaryWriters of the trainer's TensorBoard loggers (none without one)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    return [lg.experiment for lg in getattr(trainer, "loggers", []) if isinstance(lg, TensorBoardLogger)]


def run_hparams(trainer, module, techniques: Sequence[Technique]) -> dict[str, Any]:
    """The settings that tell runs apart, flat and TensorBoard-typed: the module's and data module's
    init arguments (not Lightning's own entries such as ``_instantiator``) and every technique's public
    settings (``technique/<Class>/<field>``). Booleans become ``"true"`` / ``"false"``: TensorBoard's
    hparams summary would store them as the numbers 1.0 / 0.0."""
    out: dict[str, Any] = {}
    sources = {"model": dict(module.hparams or {})}
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None:
        sources["data"] = dict(getattr(datamodule, "hparams", {}) or {})
    for prefix, values in sources.items():
        for key, value in values.items():
            if not key.startswith("_"):
                out[f"{prefix}/{key}"] = value
    seed = getattr(datamodule, "seed", None)
    if isinstance(seed, int):
        out["seed"] = seed  # the run's seed (data order, sampling): seeds of one cell are rows apart
    out["techniques"] = ",".join(type(t).__name__ for t in techniques)
    for t in techniques:
        for key, value in vars(t).items():
            if not key.startswith("_") and isinstance(value, (int, float, str, bool, type(None))):
                out[f"technique/{type(t).__name__}/{key}"] = value
    return {k: _hparam_value(v) for k, v in out.items()}


def _hparam_value(value: Any) -> int | float | str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, (int, float, str)) else str(value)


def _write_hparams(writer, params: dict[str, Any], metrics: Sequence[str]) -> None:
    """The HPARAMS tab's entry for this run. Only the metric tags are declared: TensorBoard reads
    their values from the run's own scalars, so no placeholder value is logged. The settings in
    :data:`~lite_ppo.metric_names.HPARAMS_FIRST` are marked as differing: TensorBoard sorts those
    columns first (else by name, which showed five constant ``model/b...`` to ``model/g...`` columns
    and hid ``model/lr``)."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    from torch.utils.tensorboard.summary import hparams

    experiment, start, end = hparams(params, {tag: 0.0 for tag in metrics})
    plugin = experiment.value[0].metadata.plugin_data
    data = plugin_data_pb2.HParamsPluginData.FromString(plugin.content)
    for info in data.experiment.hparam_infos:
        info.differs = info.name in names.HPARAMS_FIRST
    plugin.content = data.SerializeToString()
    file_writer = writer._get_file_writer()
    for summary in (experiment, start, end):
        file_writer.add_summary(summary)
