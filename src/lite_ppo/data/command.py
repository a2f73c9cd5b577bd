"""``lite-ppo data``: list the registered datasets and fetch the ones that are not shipped.

    lite-ppo data list                      # name, role, rows, present here?, origin, license
    lite-ppo data fetch paper               # the paper's six benchmarks (MATH-500 is shipped)
    lite-ppo data fetch paper:hard aime24   # the AIME part of the hard tier, and AIME 2024
    lite-ppo data path paper:hard           # the file(s) a name resolves to, one per line

Fetching downloads from the Hugging Face Hub with the ``datasets`` library at the pinned revision,
maps the rows to the project's schema, checks the row count and SHA-256 recorded in the registry
and writes the file into ``$LITE_PPO_CACHE/data`` (``~/.cache/lite_ppo/data``).
"""

from __future__ import annotations

import argparse

from lite_ppo.data import registry
from lite_ppo.errors import OneLineParser, UserError


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="lite-ppo data",
        description="List, fetch and locate the registered datasets (benchmarks and training tiers).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser(
        "list", help="every registered dataset, its origin, license and whether it is present here"
    )
    listing.add_argument(
        "--data-dir",
        default=None,
        help="also report files found in this data folder (they win over shipped/cached copies)",
    )
    listing.add_argument(
        "--verbose", "-v", action="store_true", help="also print each set's reference origin and row checksum"
    )
    fetch = commands.add_parser("fetch", help="download sets from the Hugging Face Hub into the cache")
    fetch.add_argument(
        "names", nargs="+", metavar="NAME", help=f"dataset names or aliases ({', '.join(registry.ALIASES)})"
    )
    fetch.add_argument("--force", action="store_true", help="fetch again even when cached")
    fetch.add_argument(
        "--no-verify",
        action="store_true",
        help="cache a copy whose row count or checksum differs from the recorded one (listed as unverified)",
    )
    path = commands.add_parser("path", help="print the file(s) a dataset name resolves to (no fetching)")
    path.add_argument("names", nargs="+", metavar="NAME")
    path.add_argument("--data-dir", default=None, help="a data folder that wins over shipped/cached copies")
    return parser


def list_datasets(data_dir: str | None = None, verbose: bool = False) -> str:
    """The ``lite-ppo data list`` table."""
    header = ("name", "role", "rows", "here", "from", "license")
    rows = [header]
    for entry in registry.DATASETS.values():
        rows.append(
            (
                entry.name,
                entry.role,
                str(entry.rows),
                registry.status(entry.name, data_dir),
                entry.where_from,
                entry.license,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    if verbose:
        lines.append("")
        for entry in registry.DATASETS.values():
            lines.append(f"{entry.name}: {entry.origin}; sha256 {entry.sha256}")
    lines.append("")
    lines.append(
        f"cache: {registry.data_cache_dir()}   aliases: "
        + "; ".join(f"{k} = {' '.join(v)}" for k, v in registry.ALIASES.items() if k != "all")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``lite-ppo data``; a user mistake raises :class:`UserError` (the CLI prints one line, exit 2)."""
    args = build_parser().parse_args(argv)
    if args.command == "list":
        print(list_datasets(args.data_dir, args.verbose))
        return 0
    names = registry.expand_names(args.names)
    if args.command == "path":
        for paths in registry.locate_many(names, args.data_dir, fetch_missing=False).values():
            for path in paths:
                print(path)
        return 0
    failures = []
    for name in names:
        entry = registry.get(name)
        leaves = [registry.get(p) for p in entry.parts] if entry.parts else [entry]
        for leaf in leaves:
            if leaf.shipped:
                print(f"{leaf.name}: shipped with lite-ppo ({leaf.shipped_path})", flush=True)
                continue
            print(f"{leaf.name}: fetching hf://{leaf.hub.pinned} ...", flush=True)
            try:
                (path,) = registry.fetch(leaf.name, force=args.force, verify=not args.no_verify)
            except UserError as error:
                failures.append(f"{leaf.name}: {error}")
                continue
            except Exception as error:  # network, `datasets` errors: report per set and go on
                failures.append(
                    f"{leaf.name}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                )
                continue
            print(f"{leaf.name}: {registry.status(leaf.name)} -> {path}", flush=True)
    if failures:
        raise UserError("could not fetch " + " | ".join(failures))
    return 0
