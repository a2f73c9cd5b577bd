"""``lite-ppo prepare-model NAME``: build or convert a builtin model into the local cache, print its folder.

Example::

    lite-ppo prepare-model builtin:smollm2-135m-instruct     # prints ~/.cache/lite_ppo/models/smollm2-135m-instruct
    lite-ppo prepare-model builtin:tiny-arith --rebuild      # pre-trains it again, compares with the shipped weights
"""

from __future__ import annotations

import argparse
import sys

REBUILDABLE = "builtin:tiny-arith"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lite-ppo prepare-model",
        description="Build or convert a builtin model into the local cache and print its folder.",
    )
    parser.add_argument(
        "name",
        help=(
            "a builtin model (builtin:tiny, builtin:tiny-qwen3, builtin:tiny-arith, "
            "builtin:smollm2-135m-instruct) or a local Hugging Face folder to check"
        ),
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help=(
            f"{REBUILDABLE} only: run its supervised pre-training from scratch (500 steps on one thread, "
            "a few minutes) into --out instead of using the shipped weights, and say whether the result "
            "has the shipped weights' checksum (a CPU with other vector units rounds differently)"
        ),
    )
    parser.add_argument(
        "--out", default=None, help="with --rebuild: the folder to write (default: <model cache>/tiny-arith-rebuilt)"
    )
    args = parser.parse_args(argv)
    if args.out is not None and not args.rebuild:
        parser.error("--out goes with --rebuild")
    if args.rebuild and args.name != REBUILDABLE:
        parser.error(f"--rebuild: only {REBUILDABLE} is rebuilt from scratch, got {args.name!r}")
    if args.rebuild:
        return _rebuild_tiny_arith(args.out)
    from lite_ppo.models import resolve_model  # transformers: only when the command runs

    print(resolve_model(args.name))
    return 0


def _rebuild_tiny_arith(out: str | None) -> int:
    from lite_ppo.models import cache_dir, tiny_arith

    folder = out or str(cache_dir() / "tiny-arith-rebuilt")
    config = tiny_arith.DEFAULT_PRETRAIN
    print(
        f"lite-ppo: rebuilding {REBUILDABLE} in {folder}: {config.steps} pre-training steps on one thread",
        file=sys.stderr,
        flush=True,
    )
    tiny_arith.build_tiny_arith_model(folder, config)
    built, shipped = tiny_arith.weights_digest(folder), tiny_arith.shipped_digest()
    if built == shipped:
        print(f"lite-ppo: the rebuilt weights equal the shipped ones (sha256 {built})", file=sys.stderr)
    else:
        print(
            f"lite-ppo: the rebuilt weights differ from the shipped ones (sha256 {built}, shipped {shipped}): "
            f"this CPU rounds the pre-training differently; {REBUILDABLE} keeps using the shipped weights",
            file=sys.stderr,
        )
    print(folder)
    return 0
