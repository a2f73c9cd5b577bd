"""The CPU dispatch level below this machine's own, as environment variables, so the numerics-sensitive
tests can run with the kernels of the other CPU kind this project's machines come in.

PyTorch picks its vectorized kernels by ``ATEN_CPU_CAPABILITY`` (``avx512`` > ``avx2`` > ``default``),
oneDNN by ``ONEDNN_MAX_CPU_ISA`` and MKL by ``MKL_ENABLE_INSTRUCTIONS``. On an AVX-512 machine the
level below is AVX2 (the AMD EPYC machines' own); on an AVX2 machine it is PyTorch's scalar
``default`` (oneDNN and MKL kept as they are: capping them did not change a result there).

Run as a script it prints the assignments for a shell::

    env $(python tests/helpers/dispatch.py) python -m pytest -m numerics
"""

from __future__ import annotations

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
SCALAR = {"ATEN_CPU_CAPABILITY": "default"}


def lower_dispatch_env(native: str | None = None) -> dict[str, str]:
    """The variables that force the level below ``native`` (``torch.backends.cpu.get_cpu_capability()``)."""
    if native is None:
        import torch

        native = torch.backends.cpu.get_cpu_capability()
    return AVX2 if native.upper().startswith("AVX512") else SCALAR


if __name__ == "__main__":
    print(" ".join(f"{k}={v}" for k, v in lower_dispatch_env().items()))
