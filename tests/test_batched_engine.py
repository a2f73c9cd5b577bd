"""BatchedEngine against transformers: the same logits under teacher forcing, the same greedy tokens,
the trainer's log-probs, and the same sampling distribution as ``generate`` (chi-square, scipy)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from lite_ppo.errors import UserError
from lite_ppo.models import resolve_model
from lite_ppo.ops.sampling import sample_next, warp_logits
from lite_ppo.rollout import BatchedEngine, HFEngine, SamplingConfig
from lite_ppo.rollout.cached_decoder import CachedDecoder

pytestmark = pytest.mark.numerics


def _load(name: str, dtype: torch.dtype = torch.float32):
    path = resolve_model(name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    return model, AutoTokenizer.from_pretrained(path), path


def _prompts(tokenizer, count: int = 12) -> list[list[int]]:
    """Chat prompts of several lengths (so the batch is left-padded): sums of 1 to 4 digits."""
    sums = ["3 + 4", "47 + 85", "305 + 718", "4821 + 3075", "12 + 9", "6 + 6", "999 + 1", "2024 + 7777"]
    texts = [f"What is {sums[i % len(sums)]}?" + " Show the working." * (i % 3) for i in range(count)]
    return [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
        for t in texts
    ]


def _ids(tokenizer, texts: list[str]) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _full_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


# float32: two implementations of the same forward part at rounding level, which on the trained testbed
# models (logits up to ~30) depends on the thread count (measured: docs/benchmarks.md, "Equivalence
# tolerances"), so 5e-5 absolute, about 1e-6 of the logits' scale; float64 leaves the algorithm and one
# float32 step that both sides share: transformers' RMSNorm computes in float32 whatever the model's dtype,
# so inputs one float64 ulp apart can round apart there: below 1e-10 on these models, not on SmolLM2
# (test_smollm2_decodes_as_its_own_forward_and_greedy_as_generate below; docs/benchmarks.md).
@pytest.mark.parametrize(("dtype", "atol", "rtol"), [(torch.float32, 5e-5, 1e-5), (torch.float64, 1e-10, 1e-10)])
@pytest.mark.parametrize("name", ["builtin:testbed-base", "builtin:tiny", "builtin:tiny-qwen3"])
def test_decoder_logits_equal_the_models_own_forward_under_teacher_forcing(name, dtype, atol, rtol):
    """Prefill a left-padded batch, feed each row the tokens of a fixed continuation: every step's
    logits equal an unpadded forward of that row's prompt + continuation."""
    model, tokenizer, _ = _load(name, dtype)
    prompts = _ids(tokenizer, _prompts(tokenizer, 6))
    width, steps = max(map(len, prompts)), 12
    assert len({len(p) for p in prompts}) > 1  # the batch is padded
    generator = torch.Generator().manual_seed(0)
    continuation = torch.randint(3, model.config.vocab_size, (len(prompts), steps), generator=generator)
    input_ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        mask[row, width - len(ids) :] = 1
    decoder = CachedDecoder(model, len(prompts), width, steps)  # one sample per prompt
    got = [decoder.prefill(input_ids, mask)]
    for t in range(steps - 1):
        got.append(decoder.step(continuation[:, t]))
    got = torch.stack(got, dim=1)  # [rows, steps, V]
    for row, ids in enumerate(prompts):
        want = _full_logits(model, ids + continuation[row, : steps - 1].tolist())[len(ids) - 1 :]
        torch.testing.assert_close(got[row], want.to(got.dtype), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["builtin:testbed-base", "builtin:testbed-aligned", "builtin:tiny-qwen3"])
def test_greedy_tokens_equal_hf_generate(name):
    """Same tokens as ``generate``, EOS mid-batch included; a position where they part must be a
    float32 rounding-level near-tie of the two best logits (< 1e-4 on these models; none happened
    when written)."""
    model, tokenizer, path = _load(name)
    prompts = _ids(tokenizer, _prompts(tokenizer))
    greedy = SamplingConfig(n=2, greedy=True, max_new_tokens=80)
    hf, fast = HFEngine(batch_size=5), BatchedEngine(max_sequences=7)  # chunks that do not divide the batch
    for engine in (hf, fast):
        engine.setup(model, tokenizer, path)
    want, got = hf.generate(prompts, greedy), fast.generate(prompts, greedy)
    lengths = set()
    for prompt, w_group, g_group in zip(prompts, want, got, strict=True):
        assert len(g_group) == 2 and g_group[0].token_ids == g_group[1].token_ids
        w, g = w_group[0], g_group[0]
        lengths.add((len(g.token_ids), g.finished))
        if w.token_ids == g.token_ids:
            assert w.finished == g.finished
            continue
        split = next(i for i, (a, b) in enumerate(zip(w.token_ids, g.token_ids)) if a != b)
        top2 = _full_logits(model, prompt + w.token_ids[:split])[-1].topk(2).values
        assert float(top2[0] - top2[1]) < 1e-4, f"greedy tokens part at {split} without a near-tie"
    if name.startswith("builtin:testbed"):  # the trained models end at many lengths: EOS mid-batch
        assert len({n for n, finished in lengths if finished}) >= 3


def test_sampled_logprobs_equal_the_training_forward():
    """Each sampled token's reported log-prob is log softmax(z / T) of an unpadded forward, to 1e-5.
    In float64, so that what is compared is the computation, not float32's rounding (docs/benchmarks.md,
    "Equivalence tolerances")."""
    model, tokenizer, path = _load("builtin:testbed-base", torch.float64)
    prompts = _ids(tokenizer, _prompts(tokenizer, 8))
    sampling = SamplingConfig(n=4, temperature=0.8, top_p=0.95, top_k=50, max_new_tokens=80)
    engine = BatchedEngine()
    engine.setup(model, tokenizer, path)
    groups = engine.generate(prompts, sampling, seed=3)
    lengths = [len(g.token_ids) for group in groups for g in group]
    assert min(lengths) < 40 < max(lengths)  # rows ended at different steps: the batch shrank
    for prompt, group in zip(prompts, groups, strict=True):
        for g in group:
            logits = _full_logits(model, prompt + g.token_ids)[len(prompt) - 1 : -1] / sampling.temperature
            want = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(g.token_ids)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(g.logprobs, dtype=torch.float64), want, rtol=0, atol=1e-5)


def test_same_seed_same_samples_and_token_reports():
    model, tokenizer, path = _load("builtin:testbed-base")
    prompts = _ids(tokenizer, _prompts(tokenizer, 6))
    sampling = SamplingConfig(n=4, max_new_tokens=80)
    engine = BatchedEngine()
    engine.setup(model, tokenizer, path)
    reported = []
    engine.on_tokens = reported.append
    first = engine.generate(prompts, sampling, seed=11)
    engine.on_tokens = None
    second = engine.generate(prompts, sampling, seed=11)
    assert [[g.token_ids for g in grp] for grp in first] == [[g.token_ids for g in grp] for grp in second]
    assert sum(reported) == sum(len(g.token_ids) for grp in first for g in grp)
    for grp in first:
        for g in grp:
            assert g.finished == (g.token_ids[-1] in (tokenizer.eos_token_id, model.generation_config.eos_token_id))
            assert g.finished or len(g.token_ids) == 80


def _sharp_tiny_model():
    """The random tiny Llama with its output scaled so the next-token distribution is far from
    uniform: a wrong temperature or filter then changes it measurably."""
    model, tokenizer, path = _load("builtin:tiny")
    model.config.tie_word_embeddings = False
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False)
    head.weight.data = model.get_output_embeddings().weight.data.clone() * 2
    model.lm_head = head
    return model, tokenizer, path


def _expected_first_token(model, prompt, temperature, top_k, top_p) -> torch.Tensor:
    """``generate``'s own processors on the model's logits: the distribution HF samples from."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k > 0:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    scores = warpers(torch.tensor([prompt]), _full_logits(model, prompt)[-1:])
    return scores.softmax(-1)[0].double()


def _chi2_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit; a token sampled where the expected probability is 0 gives p = 0."""
    if bool((counts[probs == 0] > 0).any()):
        return 0.0
    keep = probs > 0
    expected = probs[keep] * counts.sum()
    observed = counts[keep].double()
    small = expected < 5  # pool the rare tokens into one cell, as chi-square needs
    obs = torch.cat([observed[~small], observed[small].sum()[None]]) if small.any() else observed
    exp = torch.cat([expected[~small], expected[small].sum()[None]]) if small.any() else expected
    exp = exp * (obs.sum() / exp.sum())  # the float sums agree to rounding; chisquare wants them equal
    return float(stats.chisquare(obs.numpy(), exp.numpy()).pvalue)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_first_tokens_follow_generates_distribution(seed):
    """8,000 first tokens of one prompt fit the distribution of ``generate``'s processors (p > 1e-3),
    and the same counts reject a wrong temperature, top-k or top-p (p < 1e-6): the test can fail."""
    model, tokenizer, path = _sharp_tiny_model()
    prompt = _ids(tokenizer, _prompts(tokenizer, 1))[0]
    temperature, top_k, top_p = 0.7, 12, 0.9
    engine = BatchedEngine(max_sequences=8000)
    engine.setup(model, tokenizer, path)
    sampling = SamplingConfig(n=8000, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=1)
    (group,) = engine.generate([prompt], sampling, seed=seed)
    counts = torch.bincount(torch.tensor([g.token_ids[0] for g in group]), minlength=model.config.vocab_size)
    assert _chi2_p(counts, _expected_first_token(model, prompt, temperature, top_k, top_p)) > 1e-3
    for wrong in [(1.0, top_k, top_p), (temperature, top_k * 2, 1.0), (temperature, 0, top_p)]:
        assert _chi2_p(counts, _expected_first_token(model, prompt, *wrong)) < 1e-6, wrong


def test_sampled_tokens_match_hf_generate_samples():
    """Two-sample test over the first two tokens: BatchedEngine against ``generate`` itself."""
    model, tokenizer, path = _sharp_tiny_model()
    prompt = _ids(tokenizer, _prompts(tokenizer, 1))[0]
    sampling = SamplingConfig(n=3000, temperature=0.9, top_k=20, top_p=0.95, max_new_tokens=2)
    fast, hf = BatchedEngine(max_sequences=3000), HFEngine(batch_size=1)
    for engine in (fast, hf):
        engine.setup(model, tokenizer, path)
    samples = [engine.generate([prompt], sampling, seed=seed)[0] for engine, seed in ((fast, 1), (hf, 2))]
    for position in (0, 1):
        tables = [
            torch.bincount(
                torch.tensor([g.token_ids[position] for g in group if len(g.token_ids) > position]),
                minlength=model.config.vocab_size,
            )
            for group in samples
        ]
        table = torch.stack(tables)
        table = table[:, table.sum(0) > 0]
        assert stats.chi2_contingency(table.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sample_next_draws_from_the_warped_distribution_with_ties(seed):
    """The fast sampler (top-k candidates, inverse CDF) against ``warp_logits`` (transformers' order and
    tie rules), with ties at the k-th logit: the kept set and the frequencies agree."""
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 0.5, -1.0, 1.0, 0.0]]).repeat(20000, 1)
    torch.manual_seed(seed)
    drawn = sample_next(logits, temperature=0.8, top_k=2, top_p=0.97)
    probs = warp_logits(logits[:1], 0.8, 2, 0.97).softmax(-1)[0].double()
    assert probs[1] > 0 and probs[2] > 0 and probs[3] > 0  # the k-th logit's ties are all kept
    assert _chi2_p(torch.bincount(drawn, minlength=8), probs) > 1e-3
    plain = torch.tensor([[1.0, 0.2, -0.3, 2.0, 0.0]]).repeat(20000, 1)
    drawn = sample_next(plain, temperature=1.3, top_k=0, top_p=0.8)
    assert (
        _chi2_p(torch.bincount(drawn, minlength=5), warp_logits(plain[:1], 1.3, 0, 0.8).softmax(-1)[0].double()) > 1e-3
    )


def test_warp_logits_equals_transformers_processors():
    torch.manual_seed(1)
    logits = torch.randn(64, 300) * 3
    for temperature, top_k, top_p in [(0.99, 100, 0.99), (0.6, 5, 1.0), (1.0, 0, 0.5), (1.4, 299, 0.9)]:
        warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
        if top_k > 0:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1:
            warpers.append(TopPLogitsWarper(top_p))
        want = warpers(torch.zeros(64, 1, dtype=torch.long), logits.clone())
        torch.testing.assert_close(warp_logits(logits, temperature, top_k, top_p), want, rtol=0, atol=0)


def test_an_architecture_it_cannot_decode_is_refused_in_one_line():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50))
    with pytest.raises(UserError, match="HFEngine") as error:
        BatchedEngine().setup(model, None, "")
    assert "\n" not in str(error.value)


def test_a_lora_policy_decodes_with_its_adapters():
    """A peft policy: the decoder runs its LoRA-wrapped projections as they are (no fused weights), so its
    logits are the adapted model's (float64, 1e-10), not the base's."""
    from peft import LoraConfig, get_peft_model

    model, tokenizer, _ = _load("builtin:tiny", torch.float64)
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_proj"], init_lora_weights=False)
    policy = get_peft_model(model, config).double().eval()
    prompt = _ids(tokenizer, _prompts(tokenizer, 1))[0]
    decoder = CachedDecoder(policy, 1, len(prompt), 4)
    got = decoder.prefill(torch.tensor([prompt]), torch.ones(1, len(prompt), dtype=torch.long))[0]
    want = _full_logits(policy, prompt)[-1]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    with policy.disable_adapter():
        base = _full_logits(policy, prompt)[-1]
    assert (want - base).abs().max() > 1e-3  # the adapters change the logits: the test can tell


def test_decoder_logits_with_samples_per_prompt_and_rows_dropped_midway():
    """``repeat`` samples per prompt, each fed its own continuation, rows dropped twice while decoding
    (:meth:`CachedDecoder.keep`, as finished samples are): every live row's logits at every step equal an
    unpadded forward of its prompt + continuation so far. float64, so only the algorithm is compared."""
    model, tokenizer, _ = _load("builtin:testbed-base", torch.float64)
    prompts = _ids(tokenizer, _prompts(tokenizer, 4))
    repeat, steps, width = 3, 10, max(map(len, prompts))
    rows = len(prompts) * repeat
    generator = torch.Generator().manual_seed(1)
    continuation = torch.randint(3, model.config.vocab_size, (rows, steps), generator=generator)
    input_ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for p, ids in enumerate(prompts):
        input_ids[p, width - len(ids) :] = torch.tensor(ids)
        mask[p, width - len(ids) :] = 1
    drops = {3: {1, 5, 6}, 7: {0, 2, 10}}  # step -> original rows that end there (all of prompt 0 by 7)
    decoder = CachedDecoder(model, len(prompts), width, steps, repeat=repeat)
    live = list(range(rows))
    logits = decoder.prefill(input_ids, mask)
    checked = 0
    for t in range(steps):
        for position, row in enumerate(live):
            ids = prompts[row // repeat] + continuation[row, :t].tolist()
            torch.testing.assert_close(logits[position], _full_logits(model, ids)[-1], rtol=1e-10, atol=1e-10)
            checked += 1
        if t + 1 == steps:
            break
        if t in drops:
            keep = torch.tensor([row not in drops[t] for row in live])
            decoder.keep(keep)
            live = [row for row in live if row not in drops[t]]
        logits = decoder.step(continuation[live, t])
    assert checked == 12 * 4 + 9 * 4 + 6 * 2  # rows live before, between and after the drops


@pytest.mark.extended
@pytest.mark.slow
def test_smollm2_decodes_as_its_own_forward_and_greedy_as_generate():
    """The real-LM tier's model (SmolLM2-135M-Instruct: 30 layers, 9 query heads on 3 KV heads, tied
    embeddings, rope theta 1e5, its chat template's long system prompt): the decoder's logits under teacher
    forcing equal the model's own forward in float32, and greedy tokens equal ``generate``'s. Its 30
    layers round more than the testbed's 2: 2e-4 absolute, from the worst differences measured at each
    dispatch level over 4 continuation seeds (docs/benchmarks.md, "Equivalence tolerances"). Not in float64:
    transformers' RMSNorm rounds to float32 on both sides, which alone moves some rows' float64 logits far
    above float64 rounding, so float64 would not isolate the algorithm."""
    test_decoder_logits_equal_the_models_own_forward_under_teacher_forcing(
        "builtin:smollm2-135m-instruct", torch.float32, 2e-4, 1e-5
    )
    test_greedy_tokens_equal_hf_generate("builtin:smollm2-135m-instruct")
