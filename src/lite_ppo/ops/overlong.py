"""Overlong responses: DAPO's soft length penalty (reward shaping) and filtering of truncated rows.

DAPO's "soft overlong punishment", with L the response length, L_max the maximum length and
L_buf the soft buffer before it::

    R_len(L) = 0                              if L <= L_max - L_buf
             = (L_max - L_buf - L) / L_buf    if L_max - L_buf < L <= L_max
             = -1                             if L > L_max

The penalty is continuous: 0 at the start of the buffer and -1 at L_max.
"""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer_length: int, factor: float = 1.0) -> torch.Tensor:
    """``factor * R_len(L)`` for every response length.

    Args:
        lengths: [B] response lengths in tokens.
        max_length: L_max (> 0).
        buffer_length: L_buf, 0 < L_buf <= L_max.
        factor: scale of the penalty (DAPO: 1.0).

    Returns:
        [B] float32 penalties in [-factor, 0].

    Example:
        >>> overlong_penalty(torch.tensor([10, 14, 16, 20]), max_length=16, buffer_length=4)
        tensor([ 0.0000, -0.5000, -1.0000, -1.0000])
    """
    if max_length <= 0:
        raise ValueError(f"max_length must be > 0, got {max_length}")
    if not 0 < buffer_length <= max_length:
        raise ValueError(f"buffer_length must be in (0, max_length={max_length}], got {buffer_length}")
    lengths = lengths.to(torch.float32)
    start = float(max_length - buffer_length)
    inside = (start - lengths) / float(buffer_length)
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), inside)
    penalty = torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)
    return factor * penalty


def mask_rows(loss_mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A copy of ``loss_mask`` [B, T] with the rows where ``rows`` [B] (bool) is True set to 0."""
    return loss_mask * (~rows.bool()).unsqueeze(-1).to(loss_mask.dtype)
