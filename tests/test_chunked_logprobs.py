"""Chunked log-probs and entropy from hidden states equal the full-logits computation, values and gradients."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lite_ppo.ops import (
    chunked_logprobs_and_entropy,
    entropy_from_logits,
    logprobs_from_logits,
    masked_chunked_logprobs_and_entropy,
)

# Equivalence to float rounding: .ci/run repeats these at the CPU dispatch level below this one.
pytestmark = pytest.mark.numerics


def full_reference(hidden, weight, targets, temperature):
    logits = (hidden @ weight.T).float() / temperature
    return logprobs_from_logits(logits, targets), entropy_from_logits(logits)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 100])
def test_values_and_gradients_equal_full_logits(chunk_size):
    gen = torch.Generator().manual_seed(0)
    n, hdim, vocab, temperature = 7, 16, 50, 0.7
    hidden = torch.randn(n, hdim, generator=gen, requires_grad=True)
    weight = torch.randn(vocab, hdim, generator=gen, requires_grad=True)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    g_lp, g_h = torch.randn(n, generator=gen), torch.randn(n, generator=gen)

    lp, ent = full_reference(hidden, weight, targets, temperature)
    expected = torch.autograd.grad((lp * g_lp + ent * g_h).sum(), (hidden, weight))
    lp_c, ent_c = chunked_logprobs_and_entropy(hidden, weight, targets, temperature, chunk_size)
    got = torch.autograd.grad((lp_c * g_lp + ent_c * g_h).sum(), (hidden, weight))

    torch.testing.assert_close(lp_c, lp, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent_c, ent, rtol=0, atol=1e-5)
    # float32 rounding of two different summation orders: tolerance relative to the gradient's scale
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6 * e.abs().max().item())


@pytest.mark.parametrize("chunk_size", [16, 64])
def test_gradients_under_bf16_autocast_equal_full_logits(chunk_size):
    """Mixed precision (``trainer.precision: bf16-mixed`` without DeepSpeed) runs forward under
    autocast, the lm_head matmul in bf16, and backward outside it. Backward recomputes every chunk
    but the last: before, it did so in fp32 against the lse of the bf16 forward, and the gradient
    was 6-10 % off with 4 chunks (exact with one, whose log-softmax is kept)."""
    gen = torch.Generator().manual_seed(0)
    n, hdim, vocab, temperature = 64, 32, 500, 0.7
    hidden = (3 * torch.randn(n, hdim, generator=gen)).requires_grad_()
    weight = torch.randn(vocab, hdim, generator=gen, requires_grad=True)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    g_lp, g_h = torch.randn(n, generator=gen), torch.randn(n, generator=gen)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, ent = full_reference(hidden, weight, targets, temperature)
        lp_c, ent_c = chunked_logprobs_and_entropy(hidden, weight, targets, temperature, chunk_size)
    expected = torch.autograd.grad((lp * g_lp + ent * g_h).sum(), (hidden, weight))
    got = torch.autograd.grad((lp_c * g_lp + ent_c * g_h).sum(), (hidden, weight))

    torch.testing.assert_close(lp_c, lp, rtol=0, atol=1e-4)
    torch.testing.assert_close(ent_c, ent, rtol=0, atol=1e-4)
    for g, e in zip(got, expected):
        # bf16 matmuls summed in another order (one per chunk): well under 1 % of the gradient's norm
        assert (g - e).norm() / e.norm() < 0.01


@pytest.mark.parametrize("chunk_size", [3, 100])
def test_second_backward_recomputes_the_kept_chunk(chunk_size):
    """The last chunk's log-softmax is kept from forward for the first backward only; a second
    backward over the retained graph recomputes it and gives the same gradients."""
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(7, 16, generator=gen, requires_grad=True)
    weight = torch.randn(50, 16, generator=gen, requires_grad=True)
    targets = torch.randint(0, 50, (7,), generator=gen)
    lp, ent = chunked_logprobs_and_entropy(hidden, weight, targets, 0.9, chunk_size)
    loss = (lp * torch.arange(7.0)).sum() + ent.sum()
    first = torch.autograd.grad(loss, (hidden, weight), retain_graph=True)
    second = torch.autograd.grad(loss, (hidden, weight))
    lp_ref, ent_ref = full_reference(hidden, weight, targets, 0.9)
    expected = torch.autograd.grad((lp_ref * torch.arange(7.0)).sum() + ent_ref.sum(), (hidden, weight))
    for a, b, e in zip(first, second, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-6 * e.abs().max().item())


@pytest.mark.parametrize(("n", "chunk_size", "projections"), [(7, 100, 1), (7, 7, 1), (7, 3, 5)])
def test_lm_head_projections_per_forward_and_backward(n, chunk_size, projections):
    """Forward projects every chunk once; backward recomputes all chunks but the last, whose
    log-softmax it kept: ceil(n / c) + ceil(n / c) - 1 projections (1 when one chunk holds all)."""
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(n, 16, generator=gen, requires_grad=True)
    weight = torch.randn(50, 16, generator=gen, requires_grad=True)
    targets = torch.randint(0, 50, (n,), generator=gen)
    calls = []

    class Count(TorchDispatchMode):  # sees the ops inside the autograd Function and its backward
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # The projection is [c, H] @ [H, V] (the weight's transpose); the gradient matmuls
            # are [c, V] @ [V, H] and [V, c] @ [c, H].
            if func is torch.ops.aten.mm.default and args[1].shape == (16, 50):
                calls.append(args[0].shape[0])
            return func(*args, **(kwargs or {}))

    with Count():
        lp, ent = chunked_logprobs_and_entropy(hidden, weight, targets, 1.0, chunk_size)
        (lp.sum() + ent.sum()).backward()
    assert len(calls) == projections, calls


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(9, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 9, (5,), generator=gen)

    # The op computes in float32 after the matmul; gradcheck needs float64 throughout, so compare
    # the analytic backward against finite differences of the float64 reference instead.
    def ref(h, w):
        z = h @ w.T / 1.3
        logp = torch.log_softmax(z, -1)
        return (logp.gather(-1, targets[:, None]).squeeze(-1) * torch.arange(1.0, 6.0, dtype=torch.float64)).sum() + (
            -(logp.exp() * logp).sum(-1) * 0.5
        ).sum()

    lp, ent = chunked_logprobs_and_entropy(hidden, weight, targets, 1.3, chunk_size=2)
    got = torch.autograd.grad(
        (lp.double() * torch.arange(1.0, 6.0, dtype=torch.float64)).sum() + (ent.double() * 0.5).sum(), (hidden, weight)
    )
    expected = torch.autograd.grad(ref(hidden, weight), (hidden, weight))
    assert torch.autograd.gradcheck(lambda h, w: ref(h, w), (hidden, weight))  # the reference is right
    torch.testing.assert_close(got[0].double(), expected[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1].double(), expected[1], rtol=1e-4, atol=1e-5)


def test_masked_positions_are_zero_and_not_scored():
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 4, 8, generator=gen, requires_grad=True)
    weight = torch.randn(11, 8, generator=gen)
    targets = torch.randint(0, 11, (2, 4), generator=gen)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    # NaN where the mask is 0: the result is still finite, so nothing was computed there.
    hidden_nan = hidden.detach().clone()
    hidden_nan[mask == 0] = float("nan")
    hidden_nan.requires_grad_(True)
    lp, ent = masked_chunked_logprobs_and_entropy(hidden_nan, weight, targets, mask, temperature=1.0, chunk_size=2)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    assert (lp[mask == 0] == 0).all() and (ent[mask == 0] == 0).all()
    ref_lp, ref_ent = full_reference(hidden.detach(), weight, targets, 1.0)
    torch.testing.assert_close(lp[mask == 1], ref_lp[mask == 1], rtol=0, atol=1e-5)
    torch.testing.assert_close(ent[mask == 1], ref_ent[mask == 1], rtol=0, atol=1e-5)
    (lp.sum() + ent.sum()).backward()
    assert (hidden_nan.grad[mask == 0] == 0).all()


def test_tied_embeddings_model_gradients_equal_full_logits(tiny_model_path):
    """On the tiny Llama (tied embeddings): chunked scoring from hidden states == model(...).logits, with grads."""
    from transformers import AutoModelForCausalLM

    from helpers.packed_batches import assert_same_logprobs_and_gradients, make_batch
    from lite_ppo.training.policy_forward import output_head_weight, response_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).train()
    assert model.config.tie_word_embeddings
    assert output_head_weight(model) is model.get_input_embeddings().weight
    batch = make_batch([5, 8], [3, 2], [4, 7, 2, 6, 3], vocab=model.config.vocab_size, seed=3)
    assert_same_logprobs_and_gradients(model, batch, lambda m, b: response_logprobs(m, b, pack=False, chunk_size=3)[0])


def test_head_with_bias_falls_back_to_the_head_module(tiny_model_path):
    """A head the fast path cannot take as a plain weight (here: a bias) is called as a module, still exact."""
    from transformers import AutoModelForCausalLM

    from helpers.packed_batches import assert_same_logprobs_and_gradients, make_batch
    from lite_ppo.training.policy_forward import output_head_weight, response_logprobs

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).train()
    old = model.get_output_embeddings()
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    model.lm_head = head
    assert output_head_weight(model) is None
    batch = make_batch([5, 8], [3, 2], [4, 7, 2, 6, 3], vocab=model.config.vocab_size, seed=6)
    for pack in (False, True):
        assert_same_logprobs_and_gradients(model, batch, lambda m, b, pack=pack: response_logprobs(m, b, pack=pack)[0])
