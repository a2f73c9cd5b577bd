"""Two gloo processes compute what one process computes on the same global rollout batch
(the batch, the worker and the comparison: tests/helpers/distributed.py)."""

from __future__ import annotations

import pytest
import torch

from helpers.distributed import (
    MODE_TECHNIQUES,
    MODES,
    WORLD,
    G,
    assert_same_as_single,
    initial_weights,
    launch,
    load_results,
    rank_rollout,
)


@pytest.mark.slow
def test_two_ddp_ranks_equal_one_process(tmp_path, tiny_model_path, single_results):
    launch("ddp", tmp_path, tiny_model_path)
    w0 = initial_weights(tiny_model_path)
    for mode in MODES:
        measured = assert_same_as_single(
            load_results(tmp_path, mode), load_results(single_results, mode), w0, compare_grads="@clip" not in mode
        )
        print(mode, {k: f"{v:.3g}" for k, v in measured.items() if not k.startswith("stat:")})
        if mode in MODE_TECHNIQUES:  # its techniques' selections were recorded, and compared above
            assert load_results(single_results, mode)[0]["selections"], mode
        if "@clip" in mode:
            # clipping really acted (pre-clip norm above the bound) and left the gradient at the bound
            bound = float(mode.partition("@clip")[2])
            for results in (load_results(tmp_path, mode), load_results(single_results, mode)):
                assert float(results[0]["stats"]["update/grad_norm"]) > 1.5 * bound
                clipped = torch.linalg.vector_norm(torch.stack([g.norm() for g in results[0]["grads"].values()]))
                assert float(clipped) == pytest.approx(bound, rel=1e-4)
        for rank in load_results(tmp_path, mode):
            # Gradients are all-reduced once per optimizer step, during the last micro-batch's
            # backward (the others run under no_sync); equal weights above show the sum is intact.
            steps = rank["micros_per_step"]
            assert len(steps) == 2 and min(steps) == 2, steps  # 2 optimizer steps of 2 micro-batches
            assert {step for step, _ in rank["allreduce_at"]} == {0, 1}
            assert all(micro == steps[step] for step, micro in rank["allreduce_at"]), rank["allreduce_at"]


@pytest.mark.slow
def test_lora_two_ddp_ranks_equal_one_process(tmp_path, tiny_model_path):
    """LoRA under DDP: only the adapters have gradients, DDP all-reduces them, and two ranks compute
    what one process computes on the same global batch (advantages, statistics, the adapters' first
    gradient and their updates after two optimizer steps); the frozen base stays bit-identical in both.
    The KL-shaped REINFORCE++ the worker also computes scores its reference with the adapters off."""
    mode = "token-mean"
    launch("single", tmp_path / "single", tiny_model_path, modes=(mode,), lora=True)
    launch("ddp", tmp_path / "ddp", tiny_model_path, modes=(mode,), lora=True)
    single, multi = load_results(tmp_path / "single", mode), load_results(tmp_path / "ddp", mode)
    w0 = single[0]["initial"]
    adapters = {name for name in w0 if "lora_" in name}
    assert adapters and set(single[0]["grads"]) == {name for name in single[0]["grads"] if "lora_" in name}
    assert all(torch.equal(multi[0]["initial"][name], w0[name]) for name in w0)  # the same start
    measured = assert_same_as_single(multi, single, w0)
    print("lora", {k: f"{v:.3g}" for k, v in measured.items() if not k.startswith("stat:")})
    for results in (single, multi):
        final = results[0]["weights"]
        assert all(torch.equal(final[name], w0[name]) for name in w0 if name not in adapters)
        assert any(not torch.equal(final[name], w0[name]) for name in adapters)


def test_rank_shares_keep_groups_whole(tiny_model_path):
    """Ranks split the global batch by *prompts* (the data module), each rank generates all G
    responses of its prompts, so a group never straddles ranks; the shares rebuild the global batch."""
    from transformers import AutoTokenizer

    from lite_ppo.data.datamodule import MathDataModule

    dm = MathDataModule(prompts_per_step=8)
    for k in (0, 5):
        shares = [dm.rank_batch(k, r, WORLD) for r in range(WORLD)]
        assert [p.id for s in shares for p in s["problems"]] == [p.id for p in dm.global_batch(k)]
        assert [s["offset"] for s in shares] == [0, 4]
    with pytest.raises(ValueError, match="divisible"):
        MathDataModule(prompts_per_step=7).rank_batch(0, 0, WORLD)

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    whole = rank_rollout(tok, 0, 1)
    parts = [rank_rollout(tok, r, WORLD) for r in range(WORLD)]
    assert sum(p.num_responses for p in parts) == whole.num_responses
    for p in parts:
        counts = torch.bincount(p.group_ids)
        assert (counts == G).all()
    torch.testing.assert_close(torch.cat([p.rewards for p in parts]), whole.rewards)
    torch.testing.assert_close(torch.cat([p.response_lengths for p in parts]), whole.response_lengths)
    # unequal token counts across ranks (the case that breaks local denominators)
    tokens = [int(p.response_mask.sum()) for p in parts]
    assert tokens[1] > 2 * tokens[0]
