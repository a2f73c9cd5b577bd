"""``lite-ppo prepare-model NAME``: build or convert a builtin model into the local cache, print its folder.

Example::

    lite-ppo prepare-model builtin:smollm2-135m-instruct     # prints ~/.cache/lite_ppo/models/smollm2-135m-instruct
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lite-ppo prepare-model",
        description="Build or convert a builtin model into the local cache and print its folder.",
    )
    parser.add_argument(
        "name",
        help=(
            "a builtin model (builtin:tiny, builtin:tiny-qwen3, "
            "builtin:smollm2-135m-instruct, ...) or a local Hugging Face folder to check"
        ),
    )
    args = parser.parse_args(argv)
    from lite_ppo.models import resolve_model  # transformers: only when the command runs

    print(resolve_model(args.name))
    return 0
