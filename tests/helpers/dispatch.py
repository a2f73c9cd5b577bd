"""The CPU dispatch levels below this machine's own, as environment variables, so the numerics-sensitive
tests can run with other kernels than the ones they were written on.

PyTorch picks its vectorized kernels by ``ATEN_CPU_CAPABILITY`` (``avx512`` > ``avx2`` > ``default``),
oneDNN by ``ONEDNN_MAX_CPU_ISA`` and MKL by ``MKL_ENABLE_INSTRUCTIONS``. The levels, lowest last:

- on an AVX-512 machine, AVX2 (all three capped: the kernels of the AVX2-only machines this project's
  CI also runs on), then PyTorch's scalar ``default``;
- on an AVX2 machine, the scalar ``default`` (oneDNN and MKL kept as they are: capping them did not
  change a result there).

The scalar level is always among them because it is the one that surely rounds differently: on an
AMD EPYC with AVX-512 the AVX2 cap left matmuls, sums and element-wise kernels bit-identical (MKL and
PyTorch's reductions took the same path), so a run at AVX2 alone would have tested nothing there
(docs/benchmarks.md, "Equivalence tolerances").

Run as a script it prints one line of assignments per level, for a shell::

    python tests/helpers/dispatch.py | while read -r level; do env $level python -m pytest -m numerics; done
"""

from __future__ import annotations

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
SCALAR = {"ATEN_CPU_CAPABILITY": "default"}


def lower_dispatch_levels(native: str | None = None) -> list[dict[str, str]]:
    """The variables of each level below ``native`` (``torch.backends.cpu.get_cpu_capability()``), the
    scalar level last."""
    if native is None:
        import torch

        native = torch.backends.cpu.get_cpu_capability()
    return [AVX2, SCALAR] if native.upper().startswith("AVX512") else [SCALAR]


if __name__ == "__main__":
    for level in lower_dispatch_levels():
        print(" ".join(f"{k}={v}" for k, v in level.items()))
