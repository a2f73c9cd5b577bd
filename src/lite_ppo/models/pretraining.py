r"""Supervised pre-training of the project's small builtin models, and shipping the result with a checksum.

The pre-trained builtins (``builtin:tiny-arith``, ``builtin:testbed-base``, ``builtin:testbed-aligned``)
are the tiny Llama of :mod:`lite_ppo.models.tiny` taught, with plain next-token loss, to answer
(problem, worked answer) pairs written exactly as training prompts are (the default
:class:`~lite_ppo.data.prompts.PromptFormatter`, chat style). Each builtin says what it teaches; this
module holds what they share:

- :func:`supervised_pretrain`: the training loop (AdamW, linear warm-up, gradient clipping, seeded
  example order), loss on the answer and its end-of-turn token only;
- :func:`deterministic_cpu`: one thread and deterministic kernels during a build, so a build is
  repeatable on one machine;
- the shipped copy: :func:`weights_digest` (a checksum of the tensors), :func:`write_shipped_manifest`
  (records it with the build's provenance) and :func:`install_shipped` (copies a shipped folder into
  the model cache and refuses it when the weights do not match the recorded checksum).

A CPU with other vector units rounds a few hundred optimizer steps differently and ends at other
weights, which is why the builtins ship their trained weights rather than build them on each machine.

Example:
    >>> from lite_ppo.models.pretraining import weights_digest
    >>> weights_digest("/tmp/tiny-arith")   # doctest: +SKIP
    '470141e3158bc356...'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from lite_ppo.errors import UserError

__all__ = [
    "SHIPPED_MANIFEST",
    "deterministic_cpu",
    "encode_examples",
    "install_shipped",
    "shipped_digest",
    "supervised_pretrain",
    "weights_digest",
    "write_shipped_manifest",
]

# The file of a shipped folder that records its checksum and provenance.
SHIPPED_MANIFEST = "lite_ppo_shipped.json"


@contextlib.contextmanager
def deterministic_cpu() -> Iterator[None]:
    """One thread and deterministic kernels for the duration of a build, restored afterwards
    (the global RNG state too: a build does not consume the caller's random draws)."""
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(threads)


def encode_examples(tokenizer, examples: Sequence[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 outside the target) of
    (problem statement, answer) pairs.

    Right padding keeps every prompt at positions 0.. as in generation (engines count positions
    over real tokens only), and the loss covers the answer and its end-of-turn token only.
    """
    from lite_ppo.data.prompts import PromptFormatter

    formatter = PromptFormatter()  # the training prompts' default: chat template + \boxed{} instruction
    prompts = formatter.encode([problem for problem, _ in examples], tokenizer)
    targets = tokenizer([answer for _, answer in examples], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    rows = [(p, list(t) + [eos]) for p, t in zip(prompts, targets, strict=True)]
    width = max(len(p) + len(t) for p, t in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for row, (p, t) in enumerate(rows):
        n = len(p) + len(t)
        input_ids[row, :n] = torch.tensor(p + t)
        attention_mask[row, :n] = 1
        labels[row, len(p) : n] = torch.tensor(t)
    return input_ids, attention_mask, labels


def supervised_pretrain(
    model: torch.nn.Module,
    tokenizer,
    examples: Sequence[tuple[str, str]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    warmup_steps: int,
    seed: int,
    decay: bool = False,
    on_step: Callable[[int, torch.nn.Module], None] | None = None,
) -> None:
    """Next-token training of ``model`` on (problem, answer) pairs, in place; leaves it in eval mode.

    AdamW (no weight decay) at ``lr`` after a linear warm-up over ``warmup_steps``, then constant or,
    with ``decay``, falling linearly to 0 at the last step (the weights settle; a constant rate leaves
    them where the last noisy steps put them); gradients clipped to norm 1; batches of ``batch_size``
    examples in an order drawn from ``seed``, reshuffled when the examples run out. ``on_step(step,
    model)`` (optional) is called after each optimizer step, e.g. to follow accuracy while tuning a
    builtin's config.
    """
    input_ids, attention_mask, labels = encode_examples(tokenizer, examples)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def factor(step: int) -> float:
        warm = min(1.0, (step + 1) / max(1, warmup_steps))
        return min(warm, (steps - step) / max(1, steps - warmup_steps)) if decay else warm

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    model.train()
    order = torch.randperm(len(input_ids), generator=generator)
    cursor = 0
    for step in range(steps):
        if cursor + batch_size > len(order):
            order, cursor = torch.randperm(len(input_ids), generator=generator), 0
        rows = order[cursor : cursor + batch_size]
        cursor += batch_size
        mask = attention_mask[rows]
        width = int(mask.sum(-1).max())  # trim the batch's common padding
        loss = model(
            input_ids=input_ids[rows, :width], attention_mask=mask[:, :width], labels=labels[rows, :width]
        ).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if on_step is not None:
            on_step(step, model)
    model.eval()


def weights_digest(folder: str | os.PathLike[str]) -> str:
    """SHA-256 of a model folder's weights: every tensor of ``model.safetensors`` by name, with its
    dtype, shape and bytes (independent of the file's header layout).

    Example:
        >>> weights_digest(SHIPPED_DIR) == shipped_digest(SHIPPED_DIR)   # doctest: +SKIP
        True
    """
    from safetensors.torch import load_file

    state = load_file(os.path.join(os.fspath(folder), "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def shipped_digest(shipped_dir: str | os.PathLike[str]) -> str:
    """The checksum recorded for a shipped folder's weights (``weights_sha256`` of its manifest)."""
    return json.loads((Path(shipped_dir) / SHIPPED_MANIFEST).read_text())["weights_sha256"]


def write_shipped_manifest(folder: str | os.PathLike[str], recipe: dict[str, Any]) -> None:
    """Record a built folder's weights checksum, every file's SHA-256 and the build's provenance
    (``recipe``: the pre-training settings) as its manifest (maintainers: after copying a new build
    into a shipped folder; CONTRIBUTING says when)."""
    import platform

    import transformers

    folder = Path(folder)
    files = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}
    files.pop(SHIPPED_MANIFEST, None)
    manifest = {
        "weights_sha256": weights_digest(folder),
        "files_sha256": files,
        "built_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(),
            "pretrain": recipe,
        },
    }
    (folder / SHIPPED_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def install_shipped(shipped_dir: str | os.PathLike[str], path: str | os.PathLike[str], name: str) -> str:
    """Copy the shipped folder of builtin ``name`` to ``path`` and check its weights' checksum.

    Raises:
        UserError: the shipped files are missing or their weights do not match the recorded
            checksum (a damaged install: reinstall the package).
    """
    path = os.fspath(path)
    try:
        expected = shipped_digest(shipped_dir)
        shutil.copytree(shipped_dir, path, dirs_exist_ok=True)
    except (OSError, ValueError, KeyError) as err:
        raise UserError(
            f"{name}: the shipped model in {shipped_dir} cannot be read ({err}); reinstall lite-ppo"
        ) from err
    try:
        actual = weights_digest(path)
    except Exception as err:  # safetensors raises its own error type for a damaged file
        actual = f"unreadable ({err})"
    if actual != expected:
        raise UserError(
            f"{name}: the shipped weights in {shipped_dir} do not match their checksum "
            f"(sha256 {actual[:16]}..., recorded {expected[:16]}...); reinstall lite-ppo"
        )
    return path
