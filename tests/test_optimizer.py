"""The fused AdamW kernel: chosen by default outside DeepSpeed, and the same update as for-each."""

from __future__ import annotations

import torch

from lite_ppo.strategies.zero import adamw_class


def test_fused_adamw_is_the_default_and_updates_like_foreach():
    optimizer_class = adamw_class(None)
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (7, 5, 3)]
    fused_params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    plain_params = [torch.nn.Parameter(p.detach().clone()) for p in fused_params]
    initial = [p.detach().clone() for p in fused_params]
    fused = optimizer_class(fused_params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    plain = torch.optim.AdamW(plain_params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, foreach=True)
    assert fused.defaults["fused"] is True and adamw_class(None, fused=False) is torch.optim.AdamW
    for step in range(5):
        grads = [torch.randn(s, generator=torch.Generator().manual_seed(step * 10 + i)) for i, s in enumerate(shapes)]
        for params, opt in ((fused_params, fused), (plain_params, plain)):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt.step()
    for a, b in zip(fused_params, plain_params):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert all((a - b).abs().max() > 1e-3 for a, b in zip(fused_params, initial))  # both moved, the same way
