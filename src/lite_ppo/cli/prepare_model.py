"""``lite-ppo prepare-model NAME``: build or convert a builtin model into the local cache, print its folder.

stdout holds the folder and nothing else (``MODEL=$(lite-ppo prepare-model builtin:tiny)``); stderr says
what was checked (every file of a cached builtin against its recorded SHA-256) or built or repaired.

Example::

    lite-ppo prepare-model builtin:smollm2-135m-instruct     # prints ~/.cache/lite_ppo/models/smollm2-135m-instruct
    lite-ppo prepare-model builtin:tiny-arith --rebuild      # pre-trains it again, compares with the shipped weights
    lite-ppo prepare-model builtin:testbed-aligned --rebuild
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from lite_ppo.errors import OneLineParser

# The builtins that ship pre-trained weights; --rebuild re-runs their pre-training for provenance.
REBUILDABLE = ("builtin:tiny-arith", "builtin:testbed-base", "builtin:testbed-aligned")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="lite-ppo prepare-model",
        description="Build or convert a builtin model into the local cache and print its folder.",
    )
    parser.add_argument(
        "name",
        help=(
            "a builtin model (builtin:tiny, builtin:tiny-qwen3, builtin:tiny-arith, builtin:testbed-base, "
            "builtin:testbed-aligned, builtin:smollm2-135m-instruct) or a local Hugging Face folder to check"
        ),
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help=(
            f"{', '.join(REBUILDABLE)} only: run its supervised pre-training again (a few minutes on one "
            "thread) into --out instead of using the shipped weights, and say whether the result has the "
            "shipped weights' checksum (a CPU with other vector units rounds differently)"
        ),
    )
    parser.add_argument(
        "--out", default=None, help="with --rebuild: the folder to write (default: <model cache>/<name>-rebuilt)"
    )
    args = parser.parse_args(argv)
    if args.out is not None and not args.rebuild:
        parser.error("--out goes with --rebuild")
    if args.rebuild and args.name not in REBUILDABLE:
        parser.error(f"--rebuild: only {', '.join(REBUILDABLE)} are rebuilt (pre-trained), got {args.name!r}")
    from lite_ppo.models.streams import stdout_to_stderr  # lite_ppo.models: transformers, only when it runs

    # stdout is the folder alone (`$(lite-ppo prepare-model ...)`): what libraries print meanwhile goes
    # to stderr (DeepSpeed's accelerator line when transformers first imports it).
    with stdout_to_stderr():
        if args.rebuild:
            folder = _rebuild(args.name, args.out)
        else:
            from lite_ppo.models.registry import check_model

            # Every file of a cached builtin is hashed against its build record (a damaged one is rebuilt).
            folder, checked = check_model(args.name)
            print(f"lite-ppo: {checked}", file=sys.stderr)
    print(folder)
    return 0


def _recipe(name: str) -> tuple[Callable[[str], str], str, str]:
    """(build into a folder, what the build does, the shipped checksum) of a rebuildable builtin."""
    if name == "builtin:tiny-arith":
        from lite_ppo.models import tiny_arith

        config = tiny_arith.DEFAULT_PRETRAIN
        what = f"{config.steps} pre-training steps on one thread"
        return (lambda folder: tiny_arith.build_tiny_arith_model(folder, config)), what, tiny_arith.shipped_digest()
    from lite_ppo.models import testbed

    init = name.rsplit("-", 1)[1]  # builtin:testbed-base -> base
    config = testbed.DEFAULT_PRETRAIN[init]
    what = f"{config.steps} pre-training steps on one thread from the shipped builtin:{config.start} weights"
    return (lambda folder: testbed.build_testbed_model(folder, init, config)), what, testbed.shipped_digest(init)


def _rebuild(name: str, out: str | None) -> str:
    from lite_ppo.models import cache_dir
    from lite_ppo.models.pretraining import weights_digest

    folder = out or str(cache_dir() / f"{name.removeprefix('builtin:')}-rebuilt")
    build, what, shipped = _recipe(name)
    print(f"lite-ppo: rebuilding {name} in {folder}: {what}", file=sys.stderr, flush=True)
    build(folder)
    built = weights_digest(folder)
    if built == shipped:
        print(f"lite-ppo: the rebuilt weights equal the shipped ones (sha256 {built})", file=sys.stderr)
    else:
        print(
            f"lite-ppo: the rebuilt weights differ from the shipped ones (sha256 {built}, shipped {shipped}): "
            f"this CPU rounds the pre-training differently; {name} keeps using the shipped weights",
            file=sys.stderr,
        )
    return folder
