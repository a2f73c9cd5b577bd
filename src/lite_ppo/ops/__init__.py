"""Pure tensor functions: advantages, the clipped surrogate, loss aggregation, statistics.

Nothing here imports the rest of the project; every function is a plain function of tensors.
"""

from lite_ppo.ops.advantages import SCOPES, group_statistics, normalized_advantages, weighted_mean_std
from lite_ppo.ops.aggregation import aggregate_loss, aggregation_denominator
from lite_ppo.ops.chunked_logprobs import chunked_logprobs_and_entropy, masked_chunked_logprobs_and_entropy
from lite_ppo.ops.logprobs import entropy_from_logits, logprobs_from_logits
from lite_ppo.ops.micro_batches import (
    padded_cost,
    real_token_span,
    split_to_count,
    token_budget_micro_batches,
)
from lite_ppo.ops.mini_batches import MINI_BATCH_SPLITS, mini_batch_rows
from lite_ppo.ops.packed_attention import SharedPromptLayout, shared_prompt_attention, shared_prompt_layout
from lite_ppo.ops.packing import (
    PackedGroups,
    group_rows,
    group_starts,
    pack_shared_prompts,
    packed_attention_mask,
    packed_lengths,
)
from lite_ppo.ops.policy_loss import clip_fractions, clipped_surrogate, ppo_clip
from lite_ppo.ops.policy_objectives import (
    POLICY_OBJECTIVES,
    PolicyObjective,
    policy_objective,
    register_policy_objective,
)
from lite_ppo.ops.stats import masked_mean, masked_std, masked_sum

__all__ = [
    "MINI_BATCH_SPLITS",
    "PackedGroups",
    "SharedPromptLayout",
    "chunked_logprobs_and_entropy",
    "masked_chunked_logprobs_and_entropy",
    "group_rows",
    "group_starts",
    "pack_shared_prompts",
    "packed_attention_mask",
    "packed_lengths",
    "mini_batch_rows",
    "padded_cost",
    "shared_prompt_attention",
    "shared_prompt_layout",
    "real_token_span",
    "split_to_count",
    "token_budget_micro_batches",
    "SCOPES",
    "aggregate_loss",
    "aggregation_denominator",
    "clip_fractions",
    "clipped_surrogate",
    "POLICY_OBJECTIVES",
    "PolicyObjective",
    "policy_objective",
    "ppo_clip",
    "register_policy_objective",
    "entropy_from_logits",
    "logprobs_from_logits",
    "masked_mean",
    "masked_std",
    "masked_sum",
    "normalized_advantages",
    "weighted_mean_std",
    "group_statistics",
]
