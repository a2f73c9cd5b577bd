"""What a LitePPO checkpoint holds beside Lightning's own state, and how a resume reads it back.

- ``policy_version``: bumped after every optimizer step; the rollout engine syncs its weights when it
  changes, so a resumed run must continue the count.
- A LoRA run's adapters only, with the identity of the frozen base they trained on instead of the base
  again (``lite_ppo.models.adapter_checkpoint``); on load the base comes from this run's model, refused
  when it is not the one the adapters trained on. Under DeepSpeed the strategy writes every rank's
  shard itself and the state is left as it is.
- The techniques' settings (``lite_ppo.training.resume``): a resumed fit says which changed.

Changed ``model.*`` settings on resume are applied where safe, else refused, never dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning.pytorch.utilities import rank_zero_info

from lite_ppo.models.adapter_checkpoint import BASE_KEY, adapter_state, base_identity, with_base_weights
from lite_ppo.strategies.zero import deepspeed_strategy
from lite_ppo.technique import techniques_of
from lite_ppo.training.resume import check_resume, format_differences, technique_differences, technique_settings

if TYPE_CHECKING:  # pragma: no cover
    from lite_ppo.training.module import LitePPO


class CheckpointContents:
    """The checkpoint hooks of one :class:`~lite_ppo.training.module.LitePPO`."""

    def __init__(self, module: LitePPO) -> None:
        self.module = module
        self._base_identity: dict[str, Any] | None = None  # hashing a large base takes seconds: once per run

    def save(self, checkpoint: dict[str, Any]) -> None:
        """Add this run's state to ``checkpoint`` (``LightningModule.on_save_checkpoint``)."""
        module, trainer = self.module, self.module._trainer
        checkpoint["policy_version"] = module.policy_version
        if module.has_adapters and "state_dict" in checkpoint and deepspeed_strategy(trainer) is None:
            if self._base_identity is None:
                self._base_identity = base_identity(module.policy, str(module.hparams.model_path))
            checkpoint["state_dict"] = adapter_state(module.policy, checkpoint["state_dict"], prefix="policy.")
            checkpoint[BASE_KEY] = self._base_identity
        if trainer is not None:
            checkpoint["techniques"] = technique_settings(techniques_of(trainer))

    def load(self, checkpoint: dict[str, Any]) -> None:
        """Read this run's state back from ``checkpoint`` (``LightningModule.on_load_checkpoint``)."""
        module, trainer = self.module, self.module._trainer
        module.policy_version = checkpoint.get("policy_version", 0)
        if BASE_KEY in checkpoint and "state_dict" in checkpoint and module.has_adapters:
            source = f"checkpoint {trainer.ckpt_path if trainer is not None else ''}".strip()
            checkpoint["state_dict"] = with_base_weights(
                module.policy, checkpoint["state_dict"], checkpoint[BASE_KEY], source, prefix="policy."
            )
        if trainer is None or trainer.state.fn != "fit":
            return
        saved = checkpoint.get("hyper_parameters")
        if saved:
            applied = check_resume(saved, dict(module.hparams), str(trainer.ckpt_path))
            if applied:
                rank_zero_info(f"resuming with changed settings (applied): {format_differences(applied)}")
        if "techniques" in checkpoint:
            changes = technique_differences(checkpoint["techniques"], technique_settings(techniques_of(trainer)))
            if changes:
                rank_zero_info(f"resuming with changed techniques (applied): {'; '.join(changes)}")
