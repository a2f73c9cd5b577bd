"""Canonical TensorBoard tags of the quantities the paper's diagnostics, the comparison figures and
the technique advisor read. Loggers write exactly these names; readers import them from here, so
a rename happens in one place.

:data:`SCALARS` documents every scalar a run logs (docs/tensorboard.md's table is rendered from it by
:func:`scalar_table_markdown`, and a test checks it against what a run actually writes);
:func:`custom_scalars_layout` is the first TensorBoard screen (the paper's key panels), and
:func:`time_series_url` opens the TIME SERIES tab with them pinned on top.

Imports nothing of the project.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Sequence

# Generation side: every response generated for the step (verifier verdicts, before shaping).
REWARD_ACCURACY = "reward/accuracy"  # share of responses the verifier judged correct
REWARD_MEAN = "reward/mean"  # mean reward as the advantage estimator sees it (after shaping)
REWARD_STD = "reward/std"  # its standard deviation over the global batch
GROUPS_ALL_CORRECT = "groups/all_correct"  # share of prompts whose G responses are all correct
GROUPS_ALL_WRONG = "groups/all_wrong"
GROUPS_MIXED = "groups/mixed"
RESPONSE_LENGTH = "response/length_mean"  # tokens
RESPONSE_LENGTH_CORRECT = "response/length_mean_correct"
RESPONSE_LENGTH_WRONG = "response/length_mean_wrong"
GENERATED_TOKENS = "response/generated_tokens"  # tokens generated in the step: the x of compare --x tokens
TRUNCATION_RATE = "response/truncation_rate"  # share of responses that hit max_new_tokens
REPETITION_TRUNCATED = "response/repetition_rate_truncated"  # share of truncated responses that repeat
OVERLONG_PROMPTS_DROPPED = "rollout/overlong_prompts_dropped"  # problems skipped this step: prompt over the limit

# Update side: the batch the optimizer saw.
ENTROPY = "policy/entropy"  # nats per token
APPROX_KL = "policy/approx_kl"  # k3 estimate of KL(pi_old || pi_theta) per token
CLIP_UPPER_POSITIVE = "clip/upper_of_positive"  # share of A>0 tokens clipped at 1 + eps_high
CLIP_LOWER_NEGATIVE = "clip/lower_of_negative"  # share of A<0 tokens clipped at 1 - eps_low
ADVANTAGE_NONZERO = "update/advantage_nonzero_share"  # share of responses with A != 0
LENGTH_ADVANTAGE_CORR = "update/length_advantage_corr"
GRAD_NORM = "update/grad_norm"
LEARNING_RATE = "update/lr"
STEP_SECONDS = "time/step_s"  # wall seconds of the whole training step (rollout + update)

# The diagnostics the paper reads: reward status, clipping by advantage sign, lengths, groups, entropy.
REWARD_STATUS_RATE = "reward/<status>_rate"  # pattern: reward_status_rate(status)
CLIP_FRACTION = "clip/fraction"  # share of loss tokens whose gradient the clip removed (either bound)
CLIP_DUAL_NEGATIVE = "clip/dual_of_negative"  # share of A<0 tokens bounded by the dual clip
ADVANTAGE_MEAN = "update/advantage_mean"
ADVANTAGE_STD = "update/advantage_std"
ADVANTAGE_MIN = "update/advantage_min"
ADVANTAGE_MAX = "update/advantage_max"
LOSS_TOKEN_FRACTION = "update/loss_token_fraction"  # response tokens that enter the loss
ENGINE_LOGPROB_DRIFT = "update/engine_logprob_drift"  # model.old_logprobs: engine: the guard's measured gap
PADDING_EFFICIENCY = "update/padding_efficiency"  # real tokens / token positions the update's forwards processed
POLICY_LOSS = "loss/policy"
TOTAL_LOSS = "loss/total"
PROMPT_LENGTH = "prompt/length_mean"  # tokens
PEAK_RSS = "memory/peak_rss_gib"
PEAK_GPU = "memory/peak_gpu_gib"
GENERATION_SECONDS = "time/generation_s"
UPDATE_SECONDS = "time/update_s"
OLD_LOGPROB_SECONDS = "time/old_logprobs_s"
UPDATE_TOKENS_PER_SECOND = "time/update_tokens_per_s"
RATIO_MAX = "policy/ratio_max"  # over the step's loss tokens, all ranks
RATIO_MIN = "policy/ratio_min"
REFILL_ROUNDS = "groups/refill_rounds"  # dynamic sampling: generation rounds beyond the first
DROPPED_RATE = "groups/dropped_rate"  # dynamic sampling: share of the first round dropped
# optimizer steps the divergence guard skipped so far in the run (non-finite loss or grad norm)
SKIPPED_STEPS = "update/skipped_steps"
# The policy objectives other than the PPO clip log their own statistics instead of clip/* (ops.POLICY_OBJECTIVES).
GSPO_CLIP_FRACTION = "gspo/clip_fraction"  # GSPO: share of responses whose sequence ratio was clipped
GSPO_CLIP_UPPER_POSITIVE = "gspo/clip_upper_of_positive"  # of A>0 responses, s_i > 1 + clip_high
GSPO_CLIP_LOWER_NEGATIVE = "gspo/clip_lower_of_negative"  # of A<0 responses, s_i < 1 - clip_low
CISPO_CLIPPED_FRACTION = "cispo/clipped_fraction"  # CISPO: share of tokens whose IS weight was clipped
SAPO_GRAD_SCALE_POSITIVE = "sapo/grad_scale_of_positive"  # SAPO: mean gate slope on A>0 tokens
SAPO_GRAD_SCALE_NEGATIVE = "sapo/grad_scale_of_negative"  # and on A<0 tokens
ENTROPY_BONUS_COEF = "entropy_bonus/coef"  # EntropyBonus: the coefficient of the step (adaptive with a target)

# Token selection (HighEntropyTokens, ClipCov, KLCov): their own tags, listed in TECHNIQUE_SCALARS.
HIGH_ENTROPY_SELECTED_SHARE = "high_entropy/selected_share"  # share of loss tokens whose surrogate keeps its gradient
HIGH_ENTROPY_THRESHOLD = "high_entropy/threshold"  # tau: the smallest selected pi_old entropy (nats)
CLIP_COV_DETACHED_SHARE = "clip_cov/detached_share"  # share of loss tokens detached from the gradient
CLIP_COV_CANDIDATE_SHARE = "clip_cov/candidate_share"  # share of loss tokens with a covariance inside the bounds
CLIP_COV_COVARIANCE = "clip_cov/covariance"  # mean Cov_t: the batch covariance of log pi_old and advantage
KL_COV_SELECTED_SHARE = "kl_cov/selected_share"  # share of loss tokens given the KL penalty
KL_COV_THRESHOLD = "kl_cov/threshold"  # the smallest covariance among them
KL_COV_COVARIANCE = "kl_cov/covariance"  # mean Cov_t

# Evaluation: eval/<benchmark>/accuracy for every benchmark and held-out tier, and the paper's average.
EVAL_PREFIX = "eval/"
EVAL_AVERAGE_ACCURACY = "eval/average/accuracy"


def eval_accuracy(name: str) -> str:
    """The tag of one benchmark's (or held-out tier's) greedy accuracy."""
    return f"{EVAL_PREFIX}{name}/accuracy"


# Held-out problems of the training tiers (data.val_size per tier), logged by Evaluation at each validation.
VAL_PREFIX = "val/"


def val_accuracy(tier: str) -> str:
    """The tag of one held-out training tier's greedy accuracy (``val/<tier>/accuracy``)."""
    return f"{VAL_PREFIX}{tier}/accuracy"


# -- the documented scalar set ------------------------------------------------------------------
# tag -> (who logs it, what it means). Every training step, whatever the recipe. "Generated" means
# every response generated for the step (all refill rounds, dropped groups included); "trained"
# means the batch the optimizer saw. Values are global over data-parallel ranks unless noted.
SCALARS: dict[str, tuple[str, str]] = {
    REWARD_ACCURACY: (
        "Diagnostics",
        "share of generated responses the verifier judged correct (`RolloutBatch.correct`; shaping does not change it)",
    ),
    REWARD_MEAN: (
        "Diagnostics",
        "mean reward of the generated responses after every "
        "technique's reward shaping (what the advantage estimator sees)",
    ),
    REWARD_STD: ("Diagnostics", "standard deviation of those rewards (Bessel)"),
    REWARD_STATUS_RATE: (
        "Diagnostics",
        "share of generated responses with each other verifier status: one tag per status of "
        "`lite_ppo.rewards.STATUSES` except `correct` (`wrong`, `no_box`, `unparsed`, `timeout`, ...)",
    ),
    GROUPS_ALL_CORRECT: (
        "Diagnostics",
        "share of prompts whose G responses are all correct (zero advantage under group centring)",
    ),
    GROUPS_ALL_WRONG: (
        "Diagnostics",
        "share of prompts whose G responses are all wrong (zero advantage under group centring)",
    ),
    GROUPS_MIXED: (
        "Diagnostics",
        "share of prompts with both correct and wrong responses (the ones that carry a learning signal)",
    ),
    PROMPT_LENGTH: ("Diagnostics", "mean prompt length in tokens (chat template included)"),
    "prompt/length_max": ("Diagnostics", "longest prompt in tokens"),
    RESPONSE_LENGTH: ("Diagnostics", "mean response length in tokens"),
    "response/length_max": ("Diagnostics", "longest response in tokens"),
    GENERATED_TOKENS: (
        "Diagnostics",
        "response tokens generated in the step, summed over ranks and refill rounds "
        "(its running sum is the x-axis of `lite-ppo compare --x tokens`)",
    ),
    RESPONSE_LENGTH_CORRECT: ("Diagnostics", "mean length of the correct responses (no point on a step without one)"),
    RESPONSE_LENGTH_WRONG: ("Diagnostics", "mean length of the wrong responses (no point on a step without one)"),
    TRUNCATION_RATE: ("Diagnostics", "share of responses that hit `max_new_tokens` without EOS"),
    REPETITION_TRUNCATED: (
        "Diagnostics",
        "share of truncated responses that are repetitive (repeated n-grams in their tail)",
    ),
    "response/repetition_rate_finished": ("Diagnostics", "the same among responses that stopped, for contrast"),
    ENTROPY: ("LitePPO", "mean per-token entropy of the policy on the trained tokens (nats)"),
    APPROX_KL: (
        "LitePPO",
        "k3 estimate of KL(pi_old || pi_theta) per trained token, averaged over the mini-batch updates",
    ),
    RATIO_MAX: ("LitePPO", "largest importance ratio pi_theta / pi_old of a trained token"),
    RATIO_MIN: ("LitePPO", "smallest importance ratio"),
    CLIP_FRACTION: (
        "LitePPO",
        "share of trained tokens whose gradient the clip removed (either bound or the dual clip); `clip/*` are the "
        "default `ppo_clip` objective's (GSPO, CISPO and SAPO log their own instead)",
    ),
    CLIP_UPPER_POSITIVE: (
        "LitePPO",
        "share of A > 0 tokens clipped at 1 + eps_high (near 0: Clip-Higher cannot matter)",
    ),
    CLIP_LOWER_NEGATIVE: ("LitePPO", "share of A < 0 tokens clipped at 1 - eps_low"),
    POLICY_LOSS: ("LitePPO", "clipped surrogate loss, mean over the step's optimizer steps"),
    GRAD_NORM: ("LitePPO", "global gradient norm before clipping, mean over the step's optimizer steps"),
    LEARNING_RATE: ("LitePPO", "learning rate after the step"),
    SKIPPED_STEPS: (
        "DivergenceGuard",
        "optimizer steps skipped so far in the run because the loss "
        "or the gradient norm was not finite (0 in a healthy run; under DeepSpeed: such steps seen, the engine "
        "applies or skips them)",
    ),
    ADVANTAGE_NONZERO: ("LitePPO", "share of trained responses with a non-zero advantage"),
    ADVANTAGE_MEAN: ("Diagnostics", "mean advantage of the trained responses"),
    ADVANTAGE_STD: ("Diagnostics", "standard deviation of the advantages"),
    ADVANTAGE_MIN: ("Diagnostics", "smallest advantage"),
    ADVANTAGE_MAX: ("Diagnostics", "largest advantage"),
    LENGTH_ADVANTAGE_CORR: (
        "Diagnostics",
        "Pearson correlation of response length and advantage (0 when either is constant)",
    ),
    LOSS_TOKEN_FRACTION: (
        "Diagnostics",
        "share of response tokens that enter the loss (below 1 when overlong filtering masks some)",
    ),
    PADDING_EFFICIENCY: (
        "LitePPO",
        "real tokens / token positions the update's forward passes processed "
        "(1 = no padding; with `pack_prompts` a group's prompt counts once)",
    ),
    STEP_SECONDS: (
        "Rollout",
        "wall seconds of the whole training step: generation, scoring, old log-probs and update (rank 0)",
    ),
    GENERATION_SECONDS: ("Rollout", "seconds generating (all refill rounds; rank 0)"),
    "time/reward_s": ("Rollout", "seconds scoring with the verifier (rank 0)"),
    "time/generation_tokens_per_s": ("Rollout", "generated tokens per second (all refill rounds; rank 0)"),
    OLD_LOGPROB_SECONDS: ("LitePPO", "seconds computing the old log-probs (mean over ranks)"),
    UPDATE_SECONDS: ("LitePPO", "seconds of the PPO update (all mini-batches; mean over ranks)"),
    UPDATE_TOKENS_PER_SECOND: ("LitePPO", "prompt + response tokens per second of the update (mean over ranks)"),
    PEAK_RSS: ("Rollout", "peak resident memory of the process so far (GiB, rank 0)"),
    OVERLONG_PROMPTS_DROPPED: (
        "Rollout",
        "problems skipped this step because their prompt exceeds "
        "`max_prompt_tokens` (models that name a context length)",
    ),
}

# Logged only in the situation named.
CONDITIONAL_SCALARS: dict[str, tuple[str, str]] = {
    PEAK_GPU: ("Rollout", "on CUDA: peak GPU memory allocated by torch during the step (GiB, rank 0)"),
    "time/weight_sync_s": (
        "Rollout",
        "with an engine that holds its own weights (vLLM): seconds pushing the policy into it (rank 0)",
    ),
    TOTAL_LOSS: ("LitePPO", "when a technique adds loss terms: the optimized loss (policy + terms)"),
    "loss/<term>": ("LitePPO", "when a technique adds loss terms: each term, named by the technique (e.g. `loss/kl`)"),
    ENGINE_LOGPROB_DRIFT: (
        "LitePPO",
        "with `model.old_logprobs: engine`: mean |log pi_trainer - log pi_engine| per token on the first micro-batch "
        "(above `engine_logprob_tolerance` the step used the trainer's own log-probs)",
    ),
    CLIP_DUAL_NEGATIVE: ("LitePPO", "with a dual clip: share of A < 0 tokens whose loss the dual clip bounds"),
    DROPPED_RATE: (
        "Rollout",
        "with a `keep_groups` technique (dynamic sampling): share of the first round's responses it dropped",
    ),
    REFILL_ROUNDS: (
        "Rollout",
        "with a `keep_groups` technique: extra generation rounds run to refill the batch",
    ),
    "eval/<benchmark>/<metric>": (
        "Evaluation",
        "at each validation, per benchmark: `accuracy`, `response_length`, `truncation_rate`, `unparsed_rate`, "
        "`num_problems` (and `mean@k` / `pass@k` / `maj@k` with several samples)",
    ),
    EVAL_AVERAGE_ACCURACY: ("Evaluation", "at each validation: the average accuracy over the benchmarks"),
    "val/<tier>/<metric>": (
        "Evaluation",
        "at each validation, per held-out training tier (`data.val_size`): the same columns",
    ),
}

# tier/<t>/<suffix>: logged only when a step's generated responses span two or more difficulty
# tiers (with one tier they would repeat the global values).
TIER_SCALARS: dict[str, tuple[str, str]] = {
    "accuracy": ("Diagnostics", "the tier's share of correct responses"),
    "length_mean": ("Diagnostics", "the tier's mean response length"),
    "truncation_rate": ("Diagnostics", "the tier's truncation rate"),
    "repetition_rate_truncated": ("Diagnostics", "the tier's repetitive share of truncated responses"),
    "groups_all_correct": ("Diagnostics", "share of the tier's prompts all correct"),
    "groups_all_wrong": ("Diagnostics", "share of the tier's prompts all wrong"),
    "groups_mixed": ("Diagnostics", "share of the tier's prompts mixed"),
    "share_of_prompts": ("Diagnostics", "the tier's share of the step's prompts"),
    "advantage_nonzero_share": ("Diagnostics", "share of the tier's trained responses with A != 0"),
    "share_of_loss_tokens": ("Diagnostics", "the tier's share of all loss tokens (how much of the gradient it drives)"),
}

# What each built-in technique that logs adds, under its own prefix.
TECHNIQUE_SCALARS: dict[str, dict[str, str]] = {
    "KLPenalty": {"kl/ref_kl": "KL to the reference model per trained token", "loss/kl": "the KL loss term"},
    "TruncatedImportanceSampling": {
        "tis/weight_mean": "mean importance weight per token",
        "tis/capped_share": "share of tokens whose weight was capped",
    },
    "LogprobDrift": {"drift/<stat>": "trainer vs engine log-prob drift (see the class docstring)"},
    "OverlongFilter": {
        "overlong_filter/masked_response_share": "share of responses masked out of the loss",
        "overlong_filter/masked_token_share": "share of tokens masked",
    },
    "OverlongRewardShaping": {
        "overlong_shaping/penalty_mean": "mean length penalty",
        "overlong_shaping/penalized_share": "share of responses penalized",
    },
    "GSPO": {
        GSPO_CLIP_FRACTION: "share of the trained responses whose sequence ratio s_i the clip removed (either bound); "
        "no `clip/*` under GSPO",
        GSPO_CLIP_UPPER_POSITIVE: "share of A > 0 responses clipped at s_i > 1 + clip_high",
        GSPO_CLIP_LOWER_NEGATIVE: "share of A < 0 responses clipped at s_i < 1 - clip_low",
        "gspo/seq_ratio_abs_dev": "mean over responses of abs(s_i - 1) (compare with the clip range)",
    },
    "CISPO": {
        CISPO_CLIPPED_FRACTION: "share of trained tokens whose importance weight was clipped (they keep their "
        "gradient); no `clip/*` under CISPO",
        "cispo/weight_mean": "mean clipped importance weight sg(clip(r)) per trained token",
    },
    "SAPO": {
        SAPO_GRAD_SCALE_POSITIVE: "mean over A > 0 tokens of the gate's slope 4 sigmoid (1 - sigmoid): the share "
        "of the plain policy gradient kept (1 on-policy); no `clip/*` under SAPO",
        SAPO_GRAD_SCALE_NEGATIVE: "the same over A < 0 tokens",
    },
    "ReinforcePlusPlus": {
        "reinforce_pp/return_mean": "mean of the (group-baselined) returns over the global batch, as whitened",
        "reinforce_pp/return_std": "their standard deviation (Bessel), the scale the advantages divide by",
        "reinforce_pp/ref_kl": "with `kl_coef` > 0: mean per-token KL estimate log pi_old - log pi_ref (k1) the "
        "returns are shaped with",
        "reinforce_pp/kl_clamped_share": "with `kl_coef` > 0: share of response tokens whose KL estimate was beyond "
        "+-10 and clamped there (a reference far from the policy)",
    },
    "EntropyBonus": {
        ENTROPY_BONUS_COEF: "the entropy coefficient c this step's loss used (moves with a target entropy)",
        "loss/entropy_bonus": "the entropy bonus term, -c x the step's token-weighted entropy",
    },
    "HighEntropyTokens": {
        HIGH_ENTROPY_SELECTED_SHARE: "share of the step's loss tokens whose surrogate keeps its gradient: "
        "ceil(share x N) / N over the global batch",
        HIGH_ENTROPY_THRESHOLD: "the entropy threshold tau, the smallest pi_old entropy selected (nats)",
    },
    "ClipCov": {
        CLIP_COV_DETACHED_SHARE: "share of the step's loss tokens detached from the policy gradient",
        CLIP_COV_CANDIDATE_SHARE: "share of loss tokens whose log-prob/advantage covariance lies inside the bounds",
        CLIP_COV_COVARIANCE: "mean per-token covariance of log pi_old and advantage over the global batch",
    },
    "KLCov": {
        KL_COV_SELECTED_SHARE: "share of the step's loss tokens given the KL penalty (the largest covariances)",
        KL_COV_THRESHOLD: "the smallest covariance among the penalized tokens",
        KL_COV_COVARIANCE: "mean per-token covariance of log pi_old and advantage over the global batch",
        "loss/kl_cov": "the KL-Cov term, coef x abs(log pi_theta - log pi_old) on the penalized tokens",
    },
}


def reward_status_rate(status: str) -> str:
    """The tag of the share of responses with one verifier status, e.g. ``reward/unparsed_rate``."""
    return f"reward/{status}_rate"


def tier_tag(tier: str, suffix: str) -> str:
    """The tag of one per-tier quantity, e.g. ``tier/hard/accuracy``."""
    return f"tier/{tier}/{suffix}"


# -- the first TensorBoard screen (CUSTOM SCALARS tab) ---------------------------------------------
# TensorBoard colours a custom-scalars line by its run, not by its tag: two tags of one run in one chart
# would be drawn in the same colour. So every chart holds one quantity (one line per run, runs in their
# own colours), and a min/mean/max triple is one "Margin" chart (the mean with its range as a band).
_TRAINING_ACCURACY_PANEL = {"accuracy, training (verifier)": REWARD_ACCURACY}
_BENCHMARK_PANEL = {"accuracy, benchmark average": EVAL_AVERAGE_ACCURACY}
_KL_PANEL = {"approx KL": APPROX_KL}
_PAPER_PANELS = {
    "response length": RESPONSE_LENGTH,
    "response length, correct": RESPONSE_LENGTH_CORRECT,
    "response length, wrong": RESPONSE_LENGTH_WRONG,
    "entropy": ENTROPY,
    "clip at the upper bound, A>0": CLIP_UPPER_POSITIVE,
    "clip at the lower bound, A<0": CLIP_LOWER_NEGATIVE,
    "truncation rate": TRUNCATION_RATE,
    "repetition among truncated": REPETITION_TRUNCATED,
    "groups mixed": GROUPS_MIXED,
    "groups all correct": GROUPS_ALL_CORRECT,
    "groups all wrong": GROUPS_ALL_WRONG,
}
_UPDATE_PANELS = {
    "advantage non-zero share": ADVANTAGE_NONZERO,
    "grad norm": GRAD_NORM,
    "length-advantage correlation": LENGTH_ADVANTAGE_CORR,
}
_TIER_PANELS = {  # title -> tag of one tier (runs with several tiers; the held-out accuracy is on the first row)
    "training accuracy": lambda tier: tier_tag(tier, "accuracy"),
    "response length": lambda tier: tier_tag(tier, "length_mean"),
    "groups mixed": lambda tier: tier_tag(tier, "groups_mixed"),
}
_COST_PANELS = {
    "step seconds": STEP_SECONDS,
    "generation seconds": GENERATION_SECONDS,
    "update seconds": UPDATE_SECONDS,
    "peak RSS (GiB)": PEAK_RSS,
    "peak GPU memory (GiB)": PEAK_GPU,
}


def _first_row(tiers: Sequence[str], benchmarks: bool, held_out: Sequence[str] | None) -> dict[str, str]:
    """Chart title -> tag of the first category, in order: what a researcher looks at first."""
    return {
        **_TRAINING_ACCURACY_PANEL,
        **{f"held-out accuracy, {tier}": val_accuracy(tier) for tier in (tiers if held_out is None else held_out)},
        **(_BENCHMARK_PANEL if benchmarks else {}),
        **_KL_PANEL,
        **_PAPER_PANELS,
    }


def custom_scalars_layout(
    tiers: Sequence[str] = (),
    techniques: Sequence[str] = (),
    benchmarks: bool = False,
    held_out: Sequence[str] | None = None,
) -> dict[str, dict[str, list]]:
    """The CUSTOM SCALARS tab of a run, in the format of ``SummaryWriter.add_custom_scalars``
    (``{category: {chart title: [kind, tags]}}``).

    The first row is what a researcher looks at first: training accuracy, the held-out accuracy of
    every tier in ``held_out`` (default: ``tiers``; none for a run without held-out problems), the
    benchmark average (only with ``benchmarks``: a run that evaluates none would show an empty chart
    there) and the KL; then the paper's other panels, the update, one
    category per training tier (with several tiers: its training accuracy, length and mixed groups),
    one chart per own tag of each technique class named in ``techniques`` (:data:`TECHNIQUE_SCALARS`),
    and the cost. Every chart draws one quantity, so each run is one line in its own colour."""

    def charts(panels: dict[str, str]) -> dict[str, list]:
        return {title: ["Multiline", [f"^{re.escape(tag)}$"]] for title, tag in panels.items()}

    first = _first_row(tiers, benchmarks, held_out)
    update = charts(_UPDATE_PANELS)
    update["advantage (mean, band from min to max)"] = ["Margin", [ADVANTAGE_MEAN, ADVANTAGE_MIN, ADVANTAGE_MAX]]
    layout = {"1 paper panels": charts(first), "2 update": update}
    if len(tiers) > 1:  # tier/<t>/* is logged only with two or more tiers
        for tier in tiers:
            layout[f"3 tier {tier}"] = charts({title: tag(tier) for title, tag in _TIER_PANELS.items()})
    own = {
        f"{technique}: {tag}": tag
        for technique in techniques
        for tag in TECHNIQUE_SCALARS.get(technique, {})
        if "<" not in tag  # a pattern such as drift/<stat> names a family, not one tag
    }
    if own:
        layout["4 techniques"] = charts(own)
    layout["5 cost"] = charts(_COST_PANELS)
    return layout


# -- the TIME SERIES tab ---------------------------------------------------------------------------------
# TensorBoard's TIME SERIES tab groups the tags by their prefix and sorts the groups by name, so it opens
# on clip/ and groups/ whatever a run logs: no setting of a run changes that order, and renaming the tags
# (0_reward/...) would split every recorded run from the new ones and break every reader. Pinned cards come
# before all groups, and TensorBoard reads them from the address (the ``pinnedCards`` parameter it writes
# itself when a card is pinned), so an address can open the tab on the key panels.
TIME_SERIES_PINS = 10  # TensorBoard keeps at most 10 pinned cards


def time_series_url(
    tiers: Sequence[str] = (),
    benchmarks: bool = False,
    held_out: Sequence[str] | None = None,
    base: str = "http://localhost:6006/",
) -> str:
    """A TensorBoard address whose TIME SERIES tab shows the first charts of :func:`custom_scalars_layout`
    pinned above every group (training accuracy, the held-out accuracy of each tier, ...), as many as
    TensorBoard pins (:data:`TIME_SERIES_PINS`)."""
    tags = list(dict.fromkeys(_first_row(tiers, benchmarks, held_out).values()))[:TIME_SERIES_PINS]
    pins = json.dumps([{"plugin": "scalars", "tag": tag} for tag in tags], separators=(",", ":"))
    # Brackets, braces, colons, commas and slashes stay readable: a query value may hold them as they are.
    return f"{base}?pinnedCards={urllib.parse.quote(pins, safe='[]{}:,/')}#timeseries"


# The settings that most often tell runs apart: the HPARAMS tab shows them as its first columns
# (TensorBoard sorts the columns it marks as differing first, then by name, and shows the first few).
HPARAMS_FIRST = ("model/lora", "model/lr", "model/model_path", "seed", "techniques")


def hparam_metrics(tiers: Sequence[str] = (), benchmarks: bool = False) -> tuple[str, ...]:
    """The run-level metrics the HPARAMS tab shows next to each run's settings (their last value):
    training accuracy, each tier's held-out accuracy, the benchmark average (only with ``benchmarks``),
    length, entropy and mixed groups."""
    held_out = tuple(val_accuracy(tier) for tier in tiers)
    average = (EVAL_AVERAGE_ACCURACY,) if benchmarks else ()
    return (REWARD_ACCURACY, *held_out, *average, RESPONSE_LENGTH, ENTROPY, GROUPS_MIXED)


def scalar_table_markdown() -> str:
    """The README's scalar table: every documented tag, who logs it, what it means."""
    rows = ["| Tag | Logged by | Meaning |", "|---|---|---|"]
    rows += [f"| `{tag}` | {who} | {what} |" for tag, (who, what) in SCALARS.items()]
    rows += [f"| `{tag}` | {who} | {what} |" for tag, (who, what) in CONDITIONAL_SCALARS.items()]
    rows += [
        f"| `tier/<t>/{suffix}` | {who} | {what} (runs with several tiers) |"
        for suffix, (who, what) in TIER_SCALARS.items()
    ]
    rows += [
        f"| `{tag}` | {technique} | {what} |"
        for technique, tags in TECHNIQUE_SCALARS.items()
        for tag, what in tags.items()
    ]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m lite_ppo.metric_names > table.md
    print(scalar_table_markdown(), end="")
