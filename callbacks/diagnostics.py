"""Diagnostics: the training-state measurements the paper says technique choices should follow."""

from __future__ import annotations

import re
from typing import Any

import torch

from lite_ppo.hooks import Technique
from lite_ppo.ops.correlation import pearson_correlation
from lite_ppo.ops.group_outcomes import group_outcome_shares
from lite_ppo.ops.repetition import repetition_shares
from lite_ppo.rollout.batch import RolloutBatch

CORRECT_STATUS = "correct"


class Diagnostics(Technique):
    """Logs, every training step, what PAPER.md's "What the paper says to measure" asks for, overall
    and per difficulty tier (``extras["tier"]``). It changes nothing in the batch.

    Two views of one step:

    - **Generation** (``reward/*``, ``groups/*``, ``response/*``, ``tier/<t>/*`` except the two
      update-side ones): every response generated for the step, collected in ``on_rollout``, so with
      dynamic sampling all refill rounds and the dropped groups count: this is how the policy
      behaves. Correctness is the verifier's verdict (``extras["reward_status"] == "correct"``,
      else ``reward > correct_threshold``), unaffected by reward shaping.
    - **Update** (``update/*``, ``clip/*_given_*``, ``tier/<t>/advantage_nonzero_rate``,
      ``tier/<t>/loss_token_share``): the batch the optimizer saw, read in ``on_update_end``, after
      advantages and loss masks.

    Every value is global (all data-parallel ranks). What the module already logs is reused, not
    recomputed: ``clip/upper``, ``clip/lower`` (shares of all loss tokens clipped at 1 + eps_high with
    A > 0, at 1 - eps_low with A < 0), ``clip/*_inactive``, ``clip/dual``, ``policy/entropy``,
    ``policy/approx_kl``, ``policy/ratio_{mean,min,max}`` and ``train/advantage_nonzero_rate``.

    Scalars:

    - ``reward/mean``, ``reward/std`` (Bessel), ``reward/accuracy``: the rewards as the estimator sees
      them (after shaping by techniques listed before this one) and the verified-correct share.
    - ``groups/all_correct``, ``groups/all_wrong``, ``groups/mixed``: shares of prompts whose G
      responses are all correct / all wrong / mixed.
    - ``response/length_mean``, ``response/length_max``, ``response/truncation_rate`` (no EOS within
      the limit), and a TensorBoard histogram ``response/length`` (per tier ``tier/<t>/length``).
    - histogram ``groups/correct_per_group``: how many of each prompt's G responses are correct.
    - ``response/repetition_rate_truncated``: share of truncated responses that are repetitive;
      ``response/repeated_ngram_share_truncated``: their mean repeated n-gram share;
      ``response/repetition_rate_finished``: the same rate among responses that stopped, for
      contrast. Definition in :mod:`lite_ppo.ops.repetition`: over the last ``repetition_window``
      tokens, the share of ``ngram``-gram positions repeating an earlier n-gram of that span; a
      response is repetitive when the share is >= ``repetition_threshold``. 0 when there are none.
    - ``update/advantage_mean``, ``update/advantage_std``, ``update/length_advantage_corr`` (Pearson
      correlation of response length and advantage over the trained responses; 0 when either is
      constant), ``update/loss_token_share`` (loss tokens / response tokens: what overlong filtering
      removed), ``update/positive_token_share``, ``update/negative_token_share`` (loss tokens with
      A > 0, A < 0).
    - ``clip/upper_given_pos`` = ``clip/upper`` / positive_token_share: the share of A > 0 tokens
      clipped at the upper bound (near 0: Clip-Higher cannot matter); ``clip/lower_given_neg``
      likewise for A < 0.
    - per tier ``tier/<t>/``: ``prompt_share``, ``accuracy``, ``reward_mean``, ``reward_std``,
      ``length_mean``, ``length_max``, ``truncation_rate``, ``repetition_rate_truncated``,
      ``groups_all_correct``, ``groups_all_wrong``, ``groups_mixed`` (generation), and
      ``advantage_nonzero_rate``, ``loss_token_share`` (the tier's share of all loss tokens: how
      much of the gradient it drives) (update).

    Args:
        per_tier: log the ``tier/<t>/*`` breakdown.
        histograms: write length histograms when the logger is TensorBoard.
        ngram, repetition_window, repetition_threshold: the repetition definition above
            (``repetition_window`` null: whole responses).
        correct_threshold: reward above which a response counts as correct when the batch has no
            verifier statuses.

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
        correct_threshold: float = 0.5,
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
        self.correct_threshold = correct_threshold
        self._generated: list[dict[str, Any]] = []

    # -- hooks -----------------------------------------------------------------------------------
    def on_rollout(self, trainer, module, batch: RolloutBatch) -> None:
        self._generated.append(self.generation_record(batch))

    def on_update_end(self, trainer, module, batch: RolloutBatch, stats: dict[str, torch.Tensor]) -> None:
        generated = self._generated or [self.generation_record(batch)]
        self._generated = []
        world = trainer.world_size if trainer is not None else 1
        # Group ids restart in every record (refill round, rank): merge_records keeps them distinct.
        gen = merge_records([r for rank in _gather_objects(generated, world) for r in rank])
        upd = merge_records(_gather_objects(self.update_record(batch), world))
        metrics = self.generation_metrics(gen)
        metrics.update(self.update_metrics(upd, stats))
        module.log_dict({k: torch.tensor(float(v)) for k, v in metrics.items()}, on_step=True, on_epoch=False, batch_size=max(batch.num_responses, 1))
        if self.histograms:
            self._write_histograms(trainer, gen)

    # -- records (per-response rows, cheap to gather) ----------------------------------------------
    def generation_record(self, batch: RolloutBatch) -> dict[str, Any]:
        """The per-response facts of a generated batch that the generation metrics need."""
        rep = repetition_shares(batch.response_ids, batch.response_lengths, self.ngram, self.repetition_window)
        return {
            "reward": batch.rewards.detach().double().cpu(),
            "correct": correct_flags(batch, self.correct_threshold).cpu(),
            "length": batch.response_lengths.detach().cpu().long(),
            "truncated": batch.truncated.detach().cpu().bool(),
            "repetition": rep.double(),
            "group": batch.group_ids.detach().cpu().long(),
            "tier": list(batch.extras.get("tier", [None] * batch.num_responses)),
        }

    def update_record(self, batch: RolloutBatch) -> dict[str, Any]:
        """The per-response facts of the trained batch that the update metrics need."""
        advantages = batch.advantages if batch.advantages is not None else torch.zeros(batch.num_responses)
        return {
            "advantage": advantages.detach().double().cpu(),
            "length": batch.response_lengths.detach().cpu().long(),
            "loss_tokens": batch.loss_mask.detach().sum(-1).double().cpu(),
            "response_tokens": batch.response_mask.detach().sum(-1).double().cpu(),
            "group": batch.group_ids.detach().cpu().long(),
            "tier": list(batch.extras.get("tier", [None] * batch.num_responses)),
        }

    # -- metrics -----------------------------------------------------------------------------------
    def generation_metrics(self, rec: dict[str, Any]) -> dict[str, float]:
        """Scalars of the generated responses (see the class docstring)."""
        out: dict[str, float] = {}
        summary = self._generation_summary(rec)
        out["reward/mean"], out["reward/std"], out["reward/accuracy"] = summary["reward_mean"], summary["reward_std"], summary["accuracy"]
        for k in ("all_correct", "all_wrong", "mixed"):
            out[f"groups/{k}"] = summary[f"groups_{k}"]
        for k in ("length_mean", "length_max", "truncation_rate", "repetition_rate_truncated", "repeated_ngram_share_truncated", "repetition_rate_finished"):
            out[f"response/{k}"] = summary[k]
        if self.per_tier:
            n_groups = max(summary["_groups"], 1)
            for tier, idx in _tier_rows(rec["tier"]).items():
                s = self._generation_summary(_select(rec, idx))
                prefix = f"tier/{tier}/"
                out[prefix + "prompt_share"] = s["_groups"] / n_groups
                for k in ("accuracy", "reward_mean", "reward_std", "length_mean", "length_max", "truncation_rate", "repetition_rate_truncated", "groups_all_correct", "groups_all_wrong", "groups_mixed"):
                    out[prefix + k] = s[k]
        return out

    def _generation_summary(self, rec: dict[str, Any]) -> dict[str, float]:
        reward, correct, length = rec["reward"], rec["correct"], rec["length"].double()
        truncated, rep = rec["truncated"], rec["repetition"]
        n = reward.numel()
        repetitive = rep >= self.repetition_threshold
        finished = ~truncated
        shares = group_outcome_shares(correct.double(), rec["group"]) if n else {"all_correct": 0.0, "all_wrong": 0.0, "mixed": 0.0}
        return {
            "reward_mean": float(reward.mean()) if n else 0.0,
            "reward_std": float(reward.std()) if n > 1 else 0.0,
            "accuracy": float(correct.double().mean()) if n else 0.0,
            "groups_all_correct": float(shares["all_correct"]),
            "groups_all_wrong": float(shares["all_wrong"]),
            "groups_mixed": float(shares["mixed"]),
            "length_mean": float(length.mean()) if n else 0.0,
            "length_max": float(length.max()) if n else 0.0,
            "truncation_rate": float(truncated.double().mean()) if n else 0.0,
            "repetition_rate_truncated": _rate(repetitive, truncated),
            "repeated_ngram_share_truncated": float(rep[truncated].mean()) if truncated.any() else 0.0,
            "repetition_rate_finished": _rate(repetitive, finished),
            "_groups": int(torch.unique(rec["group"]).numel()) if n else 0,
        }

    def update_metrics(self, rec: dict[str, Any], stats: dict[str, torch.Tensor]) -> dict[str, float]:
        """Scalars of the trained batch, plus the sign-conditional clip rates from the module's ``clip/*``."""
        adv, loss_tokens, resp_tokens = rec["advantage"], rec["loss_tokens"], rec["response_tokens"]
        n = adv.numel()
        total_loss_tokens = float(loss_tokens.sum())
        denom = max(total_loss_tokens, 1.0)
        pos_share = float(loss_tokens[adv > 0].sum()) / denom
        neg_share = float(loss_tokens[adv < 0].sum()) / denom
        out = {
            "update/advantage_mean": float(adv.mean()) if n else 0.0,
            "update/advantage_std": float(adv.std()) if n > 1 else 0.0,
            "update/length_advantage_corr": float(pearson_correlation(rec["length"].double(), adv)),
            "update/loss_token_share": total_loss_tokens / max(float(resp_tokens.sum()), 1.0),
            "update/positive_token_share": pos_share,
            "update/negative_token_share": neg_share,
        }
        if "clip/upper" in stats:
            out["clip/upper_given_pos"] = float(stats["clip/upper"]) / pos_share if pos_share > 0 else 0.0
        if "clip/lower" in stats:
            out["clip/lower_given_neg"] = float(stats["clip/lower"]) / neg_share if neg_share > 0 else 0.0
        if self.per_tier:
            for tier, idx in _tier_rows(rec["tier"]).items():
                out[f"tier/{tier}/advantage_nonzero_rate"] = float((adv[idx].abs() > 1e-8).double().mean())
                out[f"tier/{tier}/loss_token_share"] = float(loss_tokens[idx].sum()) / denom
        return out

    def _write_histograms(self, trainer, rec: dict[str, Any]) -> None:
        if trainer is None or trainer.global_rank != 0 or rec["length"].numel() == 0:
            return
        from lightning.pytorch.loggers import TensorBoardLogger

        writers = [lg.experiment for lg in getattr(trainer, "loggers", []) if isinstance(lg, TensorBoardLogger)]
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
            for tier, idx in tiers.items():
                writer.add_histogram(f"tier/{tier}/length", rec["length"][idx], step)


# -- helpers ---------------------------------------------------------------------------------------
def correct_flags(batch: RolloutBatch, threshold: float = 0.5) -> torch.Tensor:
    """[B] bool: the verifier said correct (``extras["reward_status"]``), else ``reward > threshold``."""
    statuses = batch.extras.get("reward_status")
    if statuses is not None and len(statuses) == batch.num_responses:
        return torch.tensor([s == CORRECT_STATUS for s in statuses], dtype=torch.bool)
    return (batch.rewards.detach().cpu() > threshold).bool()


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


def _gather_objects(obj: Any, world_size: int) -> list[Any]:
    """``obj`` of every rank, in rank order (one all_gather_object; no communication on one rank)."""
    if world_size <= 1:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, obj)
    return out
