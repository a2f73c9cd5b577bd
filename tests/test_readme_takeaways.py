"""The README's verdict table reports docs/takeaways.md, not numbers of its own: every estimate with its
interval, every minimum detectable effect a verdict cites and every other number in a row is one the doc
states, and its links land on the doc's sections."""

from __future__ import annotations

import re

from helpers.paths import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
DOC = (REPO / "docs/takeaways.md").read_text(encoding="utf-8")
LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")
NUMBER = re.compile(r"(?<![\w.])[+−-]?\d+(?:\.\d+)?")
ESTIMATE = re.compile(r"^[+−]\d\.\d+ \[[+−]\d\.\d+, [+−]\d\.\d+\]$")


def _table() -> list[list[str]]:
    """The cells of the verdict table's rows (the table whose last column is ``A − B [95 % CI]``)."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and line.endswith("| A − B [95 % CI] |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_table_has_a_row_per_contrast_with_its_arms_and_interval():
    rows = _table()
    assert len(rows) >= 10
    for _claim, compared, _verdict, estimate in rows:
        assert " − " in compared, compared  # which arm minus which
        assert ESTIMATE.match(estimate), estimate  # one estimate with its interval per row


def test_every_number_in_the_table_is_the_docs():
    doc_numbers = {n.replace("−", "-") for n in NUMBER.findall(DOC)}
    doc_lines = DOC.splitlines()
    for row in _table():
        *_, verdict, estimate = row
        assert estimate in DOC, estimate  # the estimate and its interval, as the doc gives them
        # The MDE a verdict cites is the one on the doc's line of that estimate.
        cited = re.search(r"no effect larger than (\d\.\d+)", verdict)
        if cited:
            assert any(estimate in line and f"| {cited.group(1)} |" in line for line in doc_lines), row
        text = LINK.sub(lambda link: link.group(1), " | ".join(row))  # link targets are not numbers
        for number in NUMBER.findall(text):
            assert number.replace("−", "-") in doc_numbers, (number, row)


def test_the_readme_links_land_on_sections_of_the_doc():
    anchors = {_slug(line.lstrip("#")) for line in DOC.splitlines() if line.startswith("#")}
    targets = [target for _, target in LINK.findall(README) if target.startswith("docs/takeaways.md#")]
    assert targets
    for target in targets:
        assert target.split("#", 1)[1] in anchors, target
