"""LoRA adapters on the policy (``model.lora``, ``lite_ppo.models.lora``) on the tiny model.

Checked against independent expectations:
- one update equals a hand-built peft model trained for one SGD step by the same loss, written out
  here (adapters to float rounding; the frozen base bit for bit, and absent from the optimizer);
- the merged weights an engine receives give the trainer's log-probs when loaded into a plain
  model of the base architecture, vLLM gives them after either sync (merged weights, or the
  adapters through its own LoRA layers), and the HF engine generates with the adapters;
- the KL reference with the adapters off is exactly a separately loaded base model;
- bad settings stop in one line before any weights load (values at construction, target modules
  from the architecture built on the meta device);
- ``export-hf`` of a LoRA checkpoint, merged and as a peft adapter folder, loads in transformers
  and gives the policy's log-probs;
- resuming a LoRA run from a mid-run checkpoint ends bit for bit where the uninterrupted run ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from helpers import update_steps
from helpers.fits import fit_one_batch
from helpers.paths import REPO
from helpers.technique_batches import step_ctx
from lite_ppo.errors import UserError
from lite_ppo.rollout.batch import RolloutBatch
from lite_ppo.technique import Technique
from lite_ppo.training.module import LitePPO

peft = pytest.importorskip("peft")

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}
ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.8, -0.3, 0.2, -0.9])
TEMPERATURE = 0.9
LR = 0.05
# Gradient tolerance relative to the gradient's largest entry, derived as GRAD_RTOL in
# tests/helpers/update_steps.py: the module scores packed, chunked rows and the hand-built model padded
# rows, so the same sums run in another order, each erring by ~sqrt(n) * u for n <= 768 terms. The full
# model's backward chains about 40 such sums; the adapters add about 20 more (A x and B (A x) in each of
# the 8 adapted layers forward and backward, and the sum over tokens of each adapter's gradient):
# 60 * sqrt(768) * 2^-24, with a margin of 1.5. A wrong update (a frozen weight that moved, an adapter
# scaled by alpha instead of alpha / r) differs by a sizeable share of the scale (alpha doubled: ~1.0).
GRAD_RTOL = 60 * 768**0.5 * 2.0**-24 * 1.5


def _batch(seed: int = 0) -> RolloutBatch:
    """8 responses (4 groups of 2), left-padded prompts of 2-4 tokens, responses of 1-5 tokens
    (the update-equivalence tests' batch, at their temperature)."""
    batch = update_steps.batch(seed=seed)
    assert batch.temperature == TEMPERATURE
    return batch


def _plain_logprobs(model: torch.nn.Module, batch: RolloutBatch) -> torch.Tensor:
    """log softmax(logits / T) of the response tokens from the model's own full-logits forward,
    padded rows and all: [B, R], 0 off the response mask (a second implementation of the scoring)."""
    position_ids = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=position_ids).logits
    p = batch.prompt_width
    logits = logits[:, p - 1 : -1].float() / batch.temperature
    picked = torch.log_softmax(logits, -1).gather(-1, batch.response_ids[..., None])[..., 0]
    return picked * batch.response_mask


def _lora_module(tiny_model_path: str, seed: int = 0, cls: type[LitePPO] = LitePPO, **kwargs) -> LitePPO:
    """A configured LoRA module whose adapters are all non-zero (peft starts B at 0, which would
    make A's first gradient 0 and the policy equal to the base)."""
    torch.manual_seed(seed)
    module = cls(model_path=tiny_model_path, lora=LORA, **kwargs)
    module.configure_model()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.copy_(0.05 * torch.randn(param.shape, generator=gen))
    return module


class FixedAdvantages(Technique):
    def compute_advantages(self, ctx, batch):
        return ADVANTAGES.to(batch.rewards.device, copy=True)


class SGDLitePPO(LitePPO):
    """Plain SGD over the trainable parameters: the step is ``-lr * g``, comparable to rounding."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD([p for p in self.policy.parameters() if p.requires_grad], lr=LR)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- one update --------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_one_lora_update_equals_a_hand_built_peft_step_and_the_base_stays_bit_identical(tiny_model_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    batch = _batch()
    module = _lora_module(tiny_model_path, cls=SGDLitePPO, num_mini_batches=1, max_grad_norm=None)
    before = _snapshot(module.policy)
    trainable = {n for n, p in module.policy.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    fit_one_batch(module, batch, [FixedAdvantages()])
    optimized = {id(p) for group in module.trainer.optimizers[0].param_groups for p in group["params"]}
    assert optimized == {id(p) for n, p in module.policy.named_parameters() if n in trainable}
    after = _snapshot(module.policy)

    # The hand-built run: the base model from its folder, peft's adapters with the same starting
    # values, the clipped surrogate at ratio 1 (one mini-batch: pi_old is the policy), token-mean.
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    config = LoraConfig(
        r=LORA["r"], lora_alpha=LORA["alpha"], target_modules=LORA["target_modules"], task_type="CAUSAL_LM"
    )
    reference = get_peft_model(base, config)
    reference.load_state_dict(before)
    reference.train()
    logprobs = _plain_logprobs(reference, batch)
    mask = batch.response_mask
    ratio = torch.exp(logprobs - logprobs.detach())
    loss = -(ADVANTAGES[:, None] * ratio * mask).sum() / mask.sum()
    optimizer = torch.optim.SGD([p for p in reference.parameters() if p.requires_grad], lr=LR)
    loss.backward()
    optimizer.step()
    expected = _snapshot(reference)

    assert after.keys() == expected.keys()
    moved = 0
    for name in after:
        if ".lora_" in name:
            step, expected_step = after[name] - before[name], expected[name] - before[name]
            scale = expected_step.abs().max().item()
            assert scale > 0, f"{name} did not move in the hand-built step"
            worst = (step - expected_step).abs().max().item()
            assert worst <= GRAD_RTOL * scale, f"{name}: step differs by {worst:.3e} > {GRAD_RTOL:.1e} x {scale:.3e}"
            moved += 1
        else:
            assert torch.equal(after[name], before[name]), f"frozen {name} changed"
    assert moved == 2 * 4 * 2  # A and B of 4 targets in each of the tiny model's 2 layers


# -- the engines --------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_merged_weights_under_base_names_give_the_trainers_logprobs(tiny_model_path):
    """What the vLLM sync sends, loaded into a plain model of the base architecture by name."""
    from lite_ppo.models.loading import load_causal_lm, load_weights
    from lite_ppo.models.lora import iter_merged_buckets
    from lite_ppo.strategies.weight_gather import GatherStats, iter_gathered_state, transformer_block

    module = _lora_module(tiny_model_path)
    batch = _batch(seed=1)
    plain = load_causal_lm(tiny_model_path)
    base_names = {name for name, _ in iter_gathered_state(plain)}
    stats = GatherStats()
    merged = dict(
        item
        for bucket in iter_merged_buckets(module.policy, 64 * 1024, stats=stats, group_by=transformer_block)
        for item in bucket
    )
    assert set(merged) == base_names and stats.buckets > 1  # every base name once (tied lm_head included)
    policy_before = _snapshot(module.policy)
    load_weights(plain, merged)
    assert all(torch.equal(v, policy_before[k]) for k, v in _snapshot(module.policy).items())  # nothing merged in place

    # W + (alpha / r) * B @ A, by hand, for one adapted weight.
    layer = module.policy.base_model.model.model.layers[0].self_attn.q_proj
    by_hand = (
        layer.base_layer.weight
        + LORA["alpha"] / LORA["r"] * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    )
    torch.testing.assert_close(plain.model.layers[0].self_attn.q_proj.weight, by_hand, rtol=0, atol=1e-6)

    with torch.no_grad():
        trainer = module.sequence_logprobs(batch)
        engine_side = _plain_logprobs(plain.eval(), batch)
        base_side = _plain_logprobs(load_causal_lm(tiny_model_path), batch)
    # Float rounding of W x + s B (A x) vs (W + s B A) x (sums of <= 768 terms): ~1e-6 here.
    torch.testing.assert_close(engine_side, trainer, atol=1e-4, rtol=0)
    assert (base_side - trainer).abs().max() > 1e-2  # the adapters matter: the base alone is far off


def test_hf_engine_generates_with_the_adapters(tiny_model_path):
    """The HF engine samples from the live peft model: its greedy continuations are the merged
    model's, and differ from the base model's."""
    from transformers import AutoModelForCausalLM

    from lite_ppo.models.loading import load_weights
    from lite_ppo.models.lora import iter_merged_buckets
    from lite_ppo.rollout import HFEngine, SamplingConfig

    module = _lora_module(tiny_model_path)
    with torch.no_grad():
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.mul_(20)  # adapters large enough to change greedy choices
    engine = HFEngine(batch_size=4)
    engine.setup(module.policy, module.tokenizer, module.model_path)
    prompts = [[5, 17, 23], [9, 40], [33, 12, 8, 21], [50, 3]]
    greedy = SamplingConfig(n=1, greedy=True, max_new_tokens=8)
    got = [g[0].token_ids for g in engine.generate(prompts, greedy)]

    def greedy_of(model):
        other = HFEngine(batch_size=4)
        other.setup(model, module.tokenizer, module.model_path)
        return [g[0].token_ids for g in other.generate(prompts, greedy)]

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    base_greedy = greedy_of(base)
    merged = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    load_weights(merged, dict(item for bucket in iter_merged_buckets(module.policy, 1 << 30) for item in bucket))
    assert got == greedy_of(merged)
    assert got != base_greedy


# Not marked numerics, as no vLLM test is: vLLM compiles its CPU kernels with inductor, which fails
# under ATEN_CPU_CAPABILITY=default (make test-numerics' scalar level); make test runs it natively.
@pytest.mark.vllm
@pytest.mark.parametrize("lora_sync", ["merged", "adapter"])
def test_vllm_engine_synced_from_a_lora_policy_reports_the_trainers_logprobs(tiny_model_path, lora_sync):
    """After a sync, of the merged weights into the base architecture or of the adapters into vLLM's
    LoRA layers, the engine's log-probs of its own samples are the peft policy's
    ``log_softmax(logits / T)`` (tolerance: tests/test_vllm_engine.py's LOGPROB_ATOL, float32 kernel
    rounding ~1e-6 on this model). Before the sync it holds the base model, which the adapters move
    far more (the negative control). A second sync after the adapters moved again replaces the
    first adapters (the engine follows the policy, not its first state)."""
    pytest.importorskip("vllm")
    from lite_ppo.rollout import SamplingConfig
    from lite_ppo.rollout.vllm import VLLMEngine

    module = _lora_module(tiny_model_path)
    with torch.no_grad():
        for name, param in module.policy.named_parameters():
            if "lora_B" in name:
                param.mul_(20)
    policy = module.policy.eval()
    engine = VLLMEngine(
        dtype="float32", kv_cache_space_gib=0.25, max_model_len=256, sync_bucket_bytes=256 * 1024, lora_sync=lora_sync
    )
    engine.setup(policy, module.tokenizer, tiny_model_path)
    try:
        prompts = [module.tokenizer.encode(p) for p in ("What is 3 + 4?", "Compute 25 - 17.", "Hello there")]
        sampling = SamplingConfig(n=3, temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=12)

        def worst_gap(groups) -> float:
            worst = 0.0
            for prompt, group in zip(prompts, groups):
                for gen in group:
                    with torch.no_grad():
                        logits = policy(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
                    trainer = torch.log_softmax(logits.float() / sampling.temperature, -1)
                    picked = trainer.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
                    worst = max(worst, (picked - torch.tensor(gen.logprobs)).abs().max().item())
            return worst

        stale = worst_gap(engine.generate(prompts, sampling, seed=11))
        engine.sync_weights(policy)
        # merged: the tiny model's blocks in several buckets; adapter: one folder loaded at once
        assert engine.last_sync_buckets > 1 if lora_sync == "merged" else engine.last_sync_buckets == 1
        synced = worst_gap(engine.generate(prompts, sampling, seed=11))
        with torch.no_grad():
            for name, param in policy.named_parameters():
                if "lora_A" in name:
                    param.mul_(-1.5)
        moved = worst_gap(engine.generate(prompts, sampling, seed=11))
        engine.sync_weights(policy)
        resynced = worst_gap(engine.generate(prompts, sampling, seed=11))
    finally:
        engine.close()
    assert synced < 1e-4 and resynced < 1e-4, (synced, resynced)
    assert stale > 1e-2 and moved > 1e-2, (stale, moved)


# -- the KL reference ---------------------------------------------------------------------------------------
def test_kl_reference_is_the_base_with_adapters_off_no_copy(tiny_model_path):
    from lite_ppo.callbacks import KLPenalty
    from lite_ppo.models.loading import load_causal_lm
    from lite_ppo.step_metrics import StepMetrics
    from lite_ppo.strategies.ranks import Ranks
    from lite_ppo.technique import MiniBatchContext

    module = _lora_module(tiny_model_path)
    batch = _batch(seed=2)
    kl = KLPenalty(coef=0.5, estimator="k3")
    kl.on_fit_start(None, module)
    assert kl.reference is None and kl.reference_is_base  # no second model

    separate = load_causal_lm(tiny_model_path)
    separate.requires_grad_(False)
    reference = kl.reference_logprobs(module, batch)
    # The same function on the same weights, whichever object holds them: equal bit for bit.
    assert torch.equal(reference, module.score_responses(batch, model=separate, with_entropy=False)[0])
    torch.testing.assert_close(reference, _plain_logprobs(separate, batch).detach(), atol=1e-5, rtol=0)

    # Afterwards the adapters are on again and still train: the term has a gradient to them only.
    logprobs, _ = module.score_responses(batch)
    assert (logprobs.detach() - reference).abs().max() > 1e-2
    metrics = StepMetrics()
    terms = kl.extra_loss_terms(
        step_ctx(None, module, metrics), MiniBatchContext(batch=batch, logprobs=logprobs, metrics=metrics)
    )
    expected = 0.5 * (torch.exp(reference - logprobs) - (reference - logprobs) - 1) * batch.response_mask
    torch.testing.assert_close(terms["kl"] * batch.response_mask, expected, atol=1e-6, rtol=1e-5)
    (terms["kl"] * batch.response_mask).sum().backward()
    grads = {n: p.grad for n, p in module.policy.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)
    assert all(p.requires_grad == ("lora_" in n) for n, p in module.policy.named_parameters())
    assert float(metrics.compute(Ranks(None))["kl/ref_kl"]) > 0
    kl.on_fit_end(None, module)
    assert not kl.reference_is_base


# -- bad settings -------------------------------------------------------------------------------------------
@pytest.fixture
def no_weights(monkeypatch):
    """Loading any weights fails the test: the check must come before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model's weights were loaded before the settings were checked")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


BAD = [
    ({"r": 0}, "model.lora.r=0"),
    ({"r": 2.5}, "model.lora.r=2.5"),
    ({"alpha": 0}, "model.lora.alpha=0"),
    ({"alpha": -8}, "model.lora.alpha=-8"),
    ({"dropout": 1.0}, "model.lora.dropout=1.0"),
    ({"dropout": -0.1}, "model.lora.dropout=-0.1"),
    ({"target_modules": []}, "model.lora.target_modules=[]"),
    ({"rank": 8}, "unknown setting 'rank'"),
]


@pytest.mark.parametrize(("lora", "needle"), BAD, ids=[needle for _, needle in BAD])
def test_bad_values_refused_in_one_line_when_the_module_is_built(no_weights, lora, needle):
    with pytest.raises(UserError) as error:
        LitePPO(model_path="builtin:tiny", lora=lora)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_unknown_target_module_refused_naming_the_architecture_before_weights_load(tiny_model_path, no_weights):
    module = LitePPO(model_path=tiny_model_path, lora={"target_modules": ["q_proj", "foo"]})
    with pytest.raises(UserError) as error:
        module.configure_model()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("model.lora.target_modules: 'foo' matches no module of LlamaForCausalLM")
    assert "modules: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" in message
    # The output head is not a target (it stays a plain linear layer for chunked scoring).
    with pytest.raises(UserError, match="'lm_head' matches no module"):
        LitePPO(model_path=tiny_model_path, lora={"target_modules": ["lm_head"]}).configure_model()
    # The counterpart: valid targets get to the weights.
    with pytest.raises(AssertionError, match="weights were loaded"):
        LitePPO(model_path=tiny_model_path, lora={"target_modules": ["q_proj"]}).configure_model()


def test_lora_under_deepspeed_refused_at_fit_start(tiny_model_path):
    from types import SimpleNamespace

    from lightning.pytorch.strategies import DeepSpeedStrategy

    from lite_ppo.training.preflight import _check_lora

    strategy = DeepSpeedStrategy.__new__(DeepSpeedStrategy)  # only its type is read
    hparams = SimpleNamespace(lora=LORA)
    with pytest.raises(UserError, match=r"^model.lora does not run under DeepSpeed \(ZeRO-3\)") as error:
        _check_lora(hparams, SimpleNamespace(strategy=strategy))
    assert "\n" not in str(error.value)
    _check_lora(SimpleNamespace(lora=None), SimpleNamespace(strategy=strategy))  # full fine-tuning: fine
    _check_lora(hparams, SimpleNamespace(strategy=None))  # LoRA without DeepSpeed: fine


# -- export -------------------------------------------------------------------------------------------------
@pytest.mark.numerics
def test_export_merged_and_adapter_folders_load_and_give_the_policys_logprobs(tiny_model_path, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from lite_ppo.checkpoints.export import export_hf

    module = _lora_module(tiny_model_path)
    ckpt = tmp_path / "lora.ckpt"
    # What Lightning writes: the module's state dict (policy.*: frozen base and adapters) and hparams.
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(), "global_step": 2}, ckpt)
    batch = _batch(seed=3)
    with torch.no_grad():
        policy = module.sequence_logprobs(batch)

    merged_dir = export_hf(ckpt, tmp_path / "merged", dtype="float32")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    assert not any("lora" in name for name in merged.state_dict())
    adapter_dir = export_hf(ckpt, tmp_path / "adapter", adapter=True)
    assert (adapter_dir / "adapter_config.json").is_file() and (adapter_dir / "adapter_model.safetensors").is_file()
    assert not (adapter_dir / "model.safetensors").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, adapter_dir).eval()
    # transformers' own peft integration reads the adapter folder (base named in adapter_config.json).
    native = AutoModelForCausalLM.from_pretrained(adapter_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for model in (merged, with_adapter, native):
            # Rounding of the merge and of the two scoring paths (packed vs padded rows): ~1e-6 here.
            torch.testing.assert_close(_plain_logprobs(model, batch), policy, atol=1e-4, rtol=0)
    with pytest.raises(UserError, match="trained the full weights"):
        full = tmp_path / "full.ckpt"
        plain = LitePPO(model_path=tiny_model_path)
        plain.configure_model()
        torch.save({"hyper_parameters": dict(plain.hparams), "state_dict": plain.state_dict()}, full)
        export_hf(full, tmp_path / "nope", adapter=True)


def test_evaluate_loads_a_lora_checkpoint(tiny_model_path, tmp_path):
    from lite_ppo.evaluation.runner import load_policy_module

    module = _lora_module(tiny_model_path)
    ckpt = tmp_path / "lora.ckpt"
    torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(), "policy_version": 3}, ckpt)
    loaded = load_policy_module(str(ckpt))
    assert loaded.has_adapters and loaded.policy_version == 3
    batch = _batch(seed=4)
    with torch.no_grad():
        assert torch.equal(loaded.sequence_logprobs(batch), module.sequence_logprobs(batch))


def test_a_lora_checkpoint_stores_the_adapters_and_refuses_another_base(tiny_model_path, tmp_path):
    """The checkpoint holds the adapters and the base's identity, not the frozen base; loading it
    (evaluate, export-hf, resume) fills the base in from model_path and gives the same policy; on
    another base (same architecture, other weights) each of them refuses in one line."""
    from lite_ppo.checkpoints.export import export_hf
    from lite_ppo.errors import UserError
    from lite_ppo.evaluation.runner import load_policy_module
    from lite_ppo.models import resolve_model
    from lite_ppo.models.adapter_checkpoint import base_digest

    module = _lora_module(tiny_model_path)
    checkpoint = {"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(), "policy_version": 2}
    full_keys = set(checkpoint["state_dict"])
    module.on_save_checkpoint(checkpoint)
    stored = set(checkpoint["state_dict"])
    trainable = {f"policy.{n}" for n, p in module.policy.named_parameters() if p.requires_grad}
    assert stored == trainable and all(".lora_" in k for k in stored) and stored < full_keys
    assert checkpoint["lora_base"]["model_path"] == tiny_model_path
    assert (
        checkpoint["lora_base"]["sha256"] == base_digest(module.policy)
        and checkpoint["lora_base"]["dtype"] == "float32"
    )
    ckpt = tmp_path / "lora.ckpt"
    torch.save(checkpoint, ckpt)
    base_file = Path(tiny_model_path) / "model.safetensors"
    assert ckpt.stat().st_size < base_file.stat().st_size / 2  # was larger than the base itself

    loaded = load_policy_module(str(ckpt))  # evaluate's loader: base from model_path, adapters from the file
    batch = _batch(seed=4)
    with torch.no_grad():
        assert torch.equal(loaded.sequence_logprobs(batch), module.sequence_logprobs(batch))
    export_hf(ckpt, tmp_path / "merged")  # export-hf: the same base filled in
    # Resume: the trainer's load hook completes the adapters with this module's base.
    resumed = _lora_module(tiny_model_path, seed=1)
    reloaded = torch.load(ckpt, map_location="cpu", weights_only=False)
    resumed.on_load_checkpoint(reloaded)
    assert set(reloaded["state_dict"]) == full_keys
    resumed.load_state_dict(reloaded["state_dict"])
    with torch.no_grad():
        assert torch.equal(resumed.sequence_logprobs(batch), module.sequence_logprobs(batch))

    other = resolve_model("builtin:tiny-arith")  # the same architecture, trained weights
    with pytest.raises(UserError, match=r"adapters were trained on .*the base loaded here differs"):
        load_policy_module(str(ckpt), base_model=other)
    with pytest.raises(UserError, match=r"the base loaded here differs"):
        export_hf(ckpt, tmp_path / "wrong", model=other)
    elsewhere = _lora_module(other)
    with pytest.raises(UserError, match=r"the base loaded here differs"):
        elsewhere.on_load_checkpoint(torch.load(ckpt, map_location="cpu", weights_only=False))


# -- resume -------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.numerics
def test_resume_of_a_lora_run_is_bit_identical(tmp_path, tiny_model_path):
    """3 rollout steps (6 optimizer steps) straight, and the same run resumed from its step-2
    checkpoint: the same adapters, AdamW state (adapters only), schedule and policy version."""
    from helpers.fits import tiny_fit_args
    from lite_ppo.cli import main

    def run(folder, *extra):
        callbacks = [
            {"remove": "lite_ppo.callbacks.AdvantageNormalization"},  # the recipe's estimator, replaced by:
            {"class_path": "helpers.reliability_faults.SignedAdvantages"},
            {"class_path": "lite_ppo.callbacks.LossAggregation", "init_args": {"mode": "token-mean"}},
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(folder / "ckpt"), "save_last": True, "every_n_train_steps": 2,
                              "save_top_k": -1},
            },
        ]  # fmt: skip
        config = folder / "callbacks.yaml"
        folder.mkdir(exist_ok=True)
        config.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
        argv = tiny_fit_args(folder, "--config", str(REPO / "configs" / "lora.yaml"), "--config", str(config))
        main([*argv, "--model.model_path=builtin:tiny", "--trainer.limit_val_batches=0",
              "--trainer.enable_progress_bar=false", "--model.lr=1e-3", *extra])  # fmt: skip
        return folder / "ckpt"

    straight = run(tmp_path / "straight")
    resumed = run(tmp_path / "resumed", f"--ckpt_path={straight / 'epoch=0-step=2.ckpt'}")
    a = torch.load(straight / "last.ckpt", map_location="cpu", weights_only=False)
    b = torch.load(resumed / "last.ckpt", map_location="cpu", weights_only=False)
    assert a["global_step"] == b["global_step"] == 6 and a["policy_version"] == b["policy_version"] == 6
    assert a["state_dict"].keys() == b["state_dict"].keys()
    initial = torch.load(straight / "epoch=0-step=2.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    adapters = [k for k in a["state_dict"] if ".lora_" in k]
    assert adapters and any(not torch.equal(a["state_dict"][k], initial[k]) for k in adapters)  # it trained
    for name in a["state_dict"]:
        assert torch.equal(a["state_dict"][name], b["state_dict"][name]), f"weight {name} differs"
    opt_a, opt_b = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    assert len(opt_a) == len(adapters) == len(opt_b)  # AdamW state of the adapters only
    for index in opt_a:
        for key in opt_a[index]:
            assert torch.equal(torch.as_tensor(opt_a[index][key]), torch.as_tensor(opt_b[index][key]))
    assert a["lr_schedulers"] == b["lr_schedulers"]


class AlternatingReward(Technique):
    """Rewards 1, 0, 1, 0, ... by row: every group is mixed, so the random tiny model's weights move."""

    def shape_rewards(self, ctx, batch):
        return (torch.arange(batch.num_responses, device=batch.rewards.device) % 2 == 0).float() - batch.rewards


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("lora_sync", ["merged", "adapter"])
def test_fit_with_vllm_and_lora_keeps_the_engine_logprob_drift_at_rounding(tmp_path, lora_sync):
    """2 rollout steps through the CLI (vLLM engine, LoRA, ``old_logprobs: engine``): at each step the
    engine's log-probs, synced as merged weights or as adapters, match the trainer's within the module's
    ``engine_logprob_tolerance`` (1e-3), so every step uses them; the second step's rollout comes
    after two optimizer steps that moved the adapters (the sync is not vacuous)."""
    pytest.importorskip("vllm")
    from helpers.fits import read_scalars, tiny_fit_args
    from lite_ppo.cli import main

    main(
        [
            *tiny_fit_args(tmp_path, "--config", str(REPO / "configs/engines/vllm_cpu.yaml")),
            "--config",
            str(REPO / "configs/lora.yaml"),
            "--trainer.callbacks+=test_lora.AlternatingReward",
            "--trainer.callbacks+=lite_ppo.callbacks.LogprobDrift",
            "--model.model_path=builtin:tiny",
            "--model.old_logprobs=engine",
            "--model.lr=1e-2",
            "--data.steps_per_epoch=2",
            "--trainer.limit_val_batches=0",
            "--rollout.engine.init_args.kv_cache_space_gib=0.25",
            "--rollout.engine.init_args.max_model_len=256",
            f"--rollout.engine.init_args.lora_sync={lora_sync}",
        ]  # fmt: skip
    )
    scalars = {tag: [v for _, v in sorted(values)] for tag, values in read_scalars(tmp_path / "tb").items()}
    drift = scalars["update/engine_logprob_drift"]
    assert len(drift) == 2 and all(v < 1e-3 for v in drift), drift
    assert len(scalars["time/weight_sync_s"]) == 2
    assert scalars["update/grad_norm"][0] > 0
