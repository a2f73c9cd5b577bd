"""Log-prob drift between the rollout engine and the trainer (a diagnostic; changes nothing)."""

from __future__ import annotations

from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lite_ppo.ops.drift import drift_sums
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.step_context import StepContext
from lite_ppo.technique import Technique


class LogprobDrift(Technique):
    """Logs, every training step, how far the rollout engine's log-probs of the sampled tokens
    (``batch.engine_logprobs``) are from the trainer's (``batch.old_logprobs``, computed by the
    module with the same weights before the first optimizer step of the step), over the response
    tokens (``batch.response_mask``), all data-parallel ranks together:

    - ``drift/mean_abs_diff``: mean over tokens of |log pi_trainer - log pi_engine|;
    - ``drift/max_abs_diff``: its maximum;
    - ``drift/mean_diff``: the signed mean (> 0: the trainer finds the sampled tokens likelier);
    - ``drift/kl_k3``: the k3 estimate of KL(pi_engine || pi_trainer) per token,
      mean of ``(r - 1) - log r`` with ``r = pi_trainer / pi_engine`` on engine-sampled tokens:
      unbiased because the tokens come from the engine (E_engine[r] = 1), >= 0 token by token, and
      0 when the two agree (:mod:`lite_ppo.ops.drift` has the derivation and the caveat for top-k /
      top-p sampling).

    With a correct weight sync and matching precision this is kernel-arithmetic noise (float32
    vLLM vs HF: ~1e-6 to 1e-5 nats); a jump means stale weights in the engine, a precision gap
    (bfloat16 engine: ~1e-2), or a log-prob definition mismatch. Engines that report no log-probs
    (``HFEngine``, which samples with the trainer's policy itself) give nothing to log: the
    callback then warns once and stays silent.

    Example::

        trainer:
          callbacks:
            - class_path: lite_ppo.callbacks.LogprobDrift
    """

    def __init__(self) -> None:
        self._warned = False

    @override
    def observe_old_logprobs(self, ctx: StepContext, batch: RolloutBatch) -> None:
        if batch.engine_logprobs is None:
            if not self._warned:
                rank_zero_warn(
                    "LogprobDrift: the rollout engine reports no log-probs (e.g. HFEngine); nothing to compare"
                )
                self._warned = True
            return
        sums = drift_sums(batch.old_logprobs, batch.engine_logprobs, batch.response_mask)
        # Token-weighted means of the sums, reduced over ranks with the step's other scalars.
        for name, total in (("mean_abs_diff", "abs_diff"), ("mean_diff", "diff"), ("kl_k3", "k3")):
            ctx.metrics.mean(f"drift/{name}", sums[total], sums["tokens"])
        ctx.metrics.max("drift/max_abs_diff", sums["max_abs_diff"])
