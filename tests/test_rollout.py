"""HF rollouts and the RolloutBatch layout: truncation flags, padding, and trainer log-probs that
match the sampling distribution token for token."""

from __future__ import annotations

import pytest
import torch

from lite_ppo.rollout import Generation, HFEngine, RolloutBatch, SamplingConfig
from lite_ppo.rollout.producer import build_rollout_batch
from lite_ppo.training.module import LitePPO


@pytest.fixture(scope="module")
def module(tiny_model_path):
    m = LitePPO(model_path=tiny_model_path, micro_batch_size=3)
    m.configure_model()
    return m


def _prompts(module, texts):
    return [module.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_truncation_flags_and_lengths_follow_max_new_tokens(module):
    engine = HFEngine(batch_size=2)
    engine.setup(module.policy, module.tokenizer, module.model_path)
    eos = module.tokenizer.eos_token_id
    prompts = _prompts(module, ["What is 1 + 2?", "Question: 7 * 8", "Hi"])
    groups = engine.generate(
        prompts, SamplingConfig(n=3, max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0), seed=0
    )
    assert [len(g) for g in groups] == [3, 3, 3]
    for gen in (g for group in groups for g in group):
        assert 1 <= len(gen.token_ids) <= 6
        if gen.finished:
            assert gen.token_ids[-1] == eos and eos not in gen.token_ids[:-1]
        else:
            assert len(gen.token_ids) == 6 and eos not in gen.token_ids


def test_build_rollout_batch_layout():
    prompts = [[5, 6, 7], [8]]
    gens = [
        [Generation([1, 2], True), Generation([3], False)],
        [Generation([4, 4, 4], False), Generation([9, 2], True)],
    ]
    b = build_rollout_batch(prompts, gens, [1.0, 0.0, 0.0, 1.0], pad_id=0, temperature=0.7)
    assert b.input_ids.tolist() == [[5, 6, 7, 1, 2, 0], [5, 6, 7, 3, 0, 0], [0, 0, 8, 4, 4, 4], [0, 0, 8, 9, 2, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]]
    assert b.response_mask.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]
    assert b.group_ids.tolist() == [0, 0, 1, 1]
    assert b.truncated.tolist() == [False, True, True, False]
    assert b.response_lengths.tolist() == [2, 1, 3, 2]
    assert b.prompt_width == 3 and b.temperature == 0.7
    assert torch.equal(b.loss_mask, b.response_mask)


def test_concat_repads_and_keeps_groups_distinct():
    a = build_rollout_batch([[5, 6]], [[Generation([1], True)]], [1.0], 0, 1.0)
    b = build_rollout_batch([[7, 8, 9]], [[Generation([2, 3, 4], False)]], [0.0], 0, 1.0)
    c = RolloutBatch.concat([a, b], pad_token_id=0)
    assert c.input_ids.tolist() == [[0, 5, 6, 1, 0, 0], [7, 8, 9, 2, 3, 4]]
    assert c.group_ids.tolist() == [0, 1]
    assert c.response_ids.tolist() == [[1, 0, 0], [2, 3, 4]]


def test_trainer_logprobs_equal_the_sampling_distribution(module):
    """The module's log pi(o_t) (left padding, position ids, temperature) equals log softmax(z / T)
    of the logits generate() sampled from, for every sampled token."""
    tok, policy = module.tokenizer, module.policy
    prompts = _prompts(module, ["What is 12 + 7?", "Answer:", "Question: 3 + 4 = ?"])
    temperature = 0.7
    width = max(map(len, prompts))
    ids = torch.full((3, width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p), 1
    torch.manual_seed(0)
    policy.eval()
    out = policy.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=temperature,
        top_k=None,
        top_p=None,
        max_new_tokens=8,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=tok.pad_token_id,
    )
    sampled = out.sequences[:, width:]
    step_logits = torch.stack(out.logits, dim=1).float()  # [3, T, V] raw logits of each step
    reference = torch.log_softmax(step_logits / temperature, -1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)

    gens = []
    for row in sampled.tolist():
        end = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
        gens.append([Generation(row[:end], end < len(row) or tok.eos_token_id in row)])
    batch = build_rollout_batch(prompts, gens, [0.0, 0.0, 0.0], tok.pad_token_id, temperature)
    got = module.sequence_logprobs(batch)
    for i, g in enumerate(gens):
        n = len(g[0].token_ids)
        torch.testing.assert_close(got[i, :n], reference[i, :n], atol=1e-4, rtol=1e-4)
        assert torch.all(got[i, n:] == 0)


def test_greedy_with_several_samples_copies_the_single_greedy_answer(module):
    engine = HFEngine(batch_size=4)
    engine.setup(module.policy, module.tokenizer, module.model_path)
    prompts = _prompts(module, ["What is 1 + 2?", "Hi"])
    one = engine.generate(prompts, SamplingConfig(n=1, greedy=True, max_new_tokens=5))
    three = engine.generate(prompts, SamplingConfig(n=3, greedy=True, max_new_tokens=5))
    for single, group in zip(one, three):
        assert len(group) == 3
        assert all(g.token_ids == single[0].token_ids and g.finished == single[0].finished for g in group)


def test_on_tokens_reports_each_decoding_step_and_adds_up_to_the_responses(module):
    """A progress display learns the tokens while they are generated: the reports sum to the response
    tokens (EOS included, the pads after it not), come once per decoding step, and change nothing."""
    engine = HFEngine(batch_size=2)
    engine.setup(module.policy, module.tokenizer, module.model_path)
    prompts = _prompts(module, ["What is 1 + 2?", "Question: 7 * 8", "Hi"])
    sampling = SamplingConfig(n=3, max_new_tokens=12, temperature=1.0, top_p=1.0, top_k=0)
    quiet = engine.generate(prompts, sampling, seed=0)
    reports: list[int] = []
    engine.on_tokens = reports.append
    groups = engine.generate(prompts, sampling, seed=0)
    assert [[g.token_ids for g in group] for group in groups] == [[g.token_ids for g in group] for group in quiet]
    lengths = [len(g.token_ids) for group in groups for g in group]
    assert sum(reports) == sum(lengths)
    # Two generate calls (batch_size 2 of 3 prompts), each reporting one count per step it ran.
    first, second = lengths[:6], lengths[6:]
    assert len(reports) == max(first) + max(second)
    assert reports[0] == 6 and max(reports) <= 6  # 2 prompts x 3 samples open at the first step
    # Greedy samples are one generated answer copied n times: only the one is reported.
    reports.clear()
    greedy = engine.generate(prompts, SamplingConfig(n=3, greedy=True, max_new_tokens=12))
    assert sum(reports) == sum(len(group[0].token_ids) for group in greedy)


# ---------------------------------------------------------------------------- the callback over the producer
def _stub_module(tokenizer, log, log_dict, techniques=()):
    """What the Rollout callback reads of the module, without a policy (a scripted engine generates);
    its step context names ``techniques`` (the module finds them at setup)."""
    from types import SimpleNamespace

    from lite_ppo.step_context import StepContext
    from lite_ppo.step_metrics import StepMetrics

    module = SimpleNamespace(
        tokenizer=tokenizer,
        policy=None,
        model_path="",
        policy_version=0,
        device=torch.device("cpu"),
        step_metrics=StepMetrics(),
        report_phase=lambda phase: None,
        log=log,
        log_dict=log_dict,
    )
    module.step_context = lambda: StepContext(None, module, module.step_metrics, None, tuple(techniques))
    return module


def test_rollout_callback_adds_every_shaping_term_then_shows_the_batch_read_only(tiny_model_path):
    """After scoring, the callback adds each technique's ``shape_rewards`` term to the verifier's
    rewards (in any callback order), then ``on_rollout`` and ``keep_groups`` see the shaped batch;
    the verifier's ``correct`` / ``reward_status`` are left as scored."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from helpers.engines import ScriptedEngine
    from lite_ppo.callbacks import Rollout
    from lite_ppo.data import Problem
    from lite_ppo.technique import Technique

    seen: dict[str, list] = {}

    class Bonus(Technique):
        def __init__(self, name, values):
            self.name, self.values = name, values

        def shape_rewards(self, ctx, batch):
            seen.setdefault("verifier", []).append(batch.rewards.tolist())
            return torch.tensor(self.values)

        def on_rollout(self, ctx, batch):
            seen.setdefault("on_rollout", []).append(batch.rewards.tolist())

        def keep_groups(self, ctx, batch):
            seen.setdefault("keep_groups", []).append(batch.rewards.tolist())
            return None

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    problems = [Problem("p1", "What is 6 * 7?", "42", "t"), Problem("p2", "What is 3 + 4?", "7", "t")]
    script = [[("\\boxed{42}", True), ("\\boxed{41}", True)], [("\\boxed{7}", True), ("no idea", True)]]
    logged = []
    results = []
    for order in ([0.5, -1.0], [-1.0, 0.5]):
        seen.clear()
        techniques = [Bonus("a", [order[0]] * 4), Bonus("b", [order[1]] * 4)]
        module = _stub_module(
            tokenizer,
            log=lambda *a, **k: logged.append(a[0]),
            log_dict=lambda d, **k: logged.extend(d),
            techniques=techniques,
        )
        # no callbacks: the rollout gets the techniques from the step's context, not by searching the trainer
        trainer = SimpleNamespace(callbacks=[], global_rank=0, world_size=1, datamodule=None)
        engine = ScriptedEngine([list(g) for g in script])
        rollout = Rollout(engine=engine, sampling=SamplingConfig(n=2, max_new_tokens=16))
        batch = {"problems": problems, "index": 0}
        shaped = rollout.training_rollout(trainer, module, batch, 0)
        assert seen["verifier"] == [[1.0, 0.0, 1.0, 0.0]] * 2  # each term is computed from the verifier's rewards
        assert shaped.rewards.tolist() == [0.5, -0.5, 0.5, -0.5]  # 1 or 0, plus 0.5 - 1.0
        assert seen["on_rollout"] == seen["keep_groups"] == [shaped.rewards.tolist()] * 2
        assert shaped.correct.tolist() == [True, False, True, False]
        assert shaped.reward_status == ["correct", "wrong", "correct", "unparsed"]
        results.append(shaped.rewards)
    assert torch.equal(results[0], results[1])  # the callback order does not matter


def test_dropped_rate_is_the_share_over_every_rank(tiny_model_path):
    """``groups/dropped_rate`` is the share of the first round's responses dynamic sampling dropped
    over all ranks, not rank 0's: two ranks (rank 0 drops 1 of its 2 groups, rank 1 none) run the
    callback's training rollout, and their step metrics are reduced as the module reduces them."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from helpers.engines import ScriptedEngine
    from lite_ppo.callbacks import DynamicSampling, Rollout
    from lite_ppo.data import Problem

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    problems = [Problem("p1", "What is 6 * 7?", "42", "t"), Problem("p2", "What is 3 + 4?", "7", "t")]
    mixed = [("\\boxed{42}", True), ("\\boxed{41}", True)], [("\\boxed{7}", True), ("\\boxed{8}", True)]
    scripts = {0: [mixed[0], [("\\boxed{7}", True)] * 2], 1: list(mixed)}  # rank 0: p2's group all right
    ranks_metrics, logged = {}, {}
    for rank, script in scripts.items():
        module = _stub_module(
            tokenizer,
            log=lambda name, value, rank=rank, **k: logged.setdefault(rank, {}).__setitem__(name, float(value)),
            log_dict=lambda d, **k: None,
            techniques=[DynamicSampling()],
        )
        trainer = SimpleNamespace(callbacks=[], global_rank=rank, world_size=2, datamodule=None)
        rollout = Rollout(engine=ScriptedEngine(script), sampling=SamplingConfig(n=2, max_new_tokens=16))
        rollout.max_refill_rounds = 0  # the first round is the step
        batch = {"problems": problems, "index": 0}
        if rank == 0:  # one group dropped and no refill: topped up with it, with a warning
            with pytest.warns(UserWarning, match="could not fill the batch"):
                rollout.training_rollout(trainer, module, batch, 0)
        else:
            rollout.training_rollout(trainer, module, batch, 0)
        ranks_metrics[rank] = module.step_metrics

    class TwoRanks:  # the all-reduce of the two ranks' step sums, as lite_ppo.strategies.Ranks does it
        def sum(self, value):
            return sum(torch.stack(list(m._sums[k] for k in sorted(m._sums))) for m in ranks_metrics.values())

        def max(self, value):
            return value

    reduced = {name: float(v) for name, v in ranks_metrics[0].compute(TwoRanks()).items()}
    step = {**reduced, **logged.get(0, {})}  # whatever rank 0 logs is what TensorBoard shows
    assert step["groups/dropped_rate"] == pytest.approx(1 / 4)  # 2 of the 8 responses: rank 0's all-right group
