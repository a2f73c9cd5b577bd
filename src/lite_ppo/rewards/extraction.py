"""Which part of a response is its answer: the strict extraction rule of the math reward.

The rule closes the ways a policy can be rewarded for text that is not a committed final answer
(each step is applied in this order; the first that decides, decides):

1. **Code is not an answer.** Markdown code (fenced blocks between ```` ``` ```` or ``~~~`` fences,
   an unclosed fence running to the end, and inline spans between matching backticks) is removed
   before anything is looked for.
2. **Look-alike boxes score 0** (status ``spoofed``): if the text as a reader sees it (Unicode NFKC,
   invisible format characters removed, backslash look-alikes and Cyrillic/Greek/Armenian look-alike
   letters read as their ASCII twins) shows more ``\\boxed``/``\\fbox`` than the text as written.
3. **A box is the answer, and only the box.** A box is ``\\boxed`` or ``\\fbox`` spelled in ASCII
   (not followed by another letter) and then, after optional spaces, a brace group ``{...}`` with
   balanced braces (``\\{`` and ``\\}`` are literal). When the response has at least one box:

   - a box without a closed brace group, an empty box, or a box inside a box: status ``unparsed``;
   - the answer is the content of the **last** box alone; nothing outside it is ever read, so an
     unparseable box scores 0 even when a stray number elsewhere would be right;
   - every other box must hold a correct answer too: boxes with different contents are a hedge,
     status ``hedged`` when the last one is right (``wrong`` when it is wrong).
4. **No box:** with ``require_boxed`` the response scores 0 (status ``no_box``); otherwise
   math-verify's extraction runs on the text (step 1 applied) and only its best-ranked candidate is
   tried (an ``answer``/``final answer is`` anchor first, else the rightmost expression): when that
   candidate does not parse the status is ``unparsed``, never an earlier expression.

The functions here are pure string processing (no math-verify, no time limits); scoring is
:mod:`lite_ppo.rewards.math_verify_reward`'s.

Example:
    >>> find_answer("so \\\\boxed{)} 1", require_boxed=False)
    Extraction(kind='box', boxes=(')',), status=None)
    >>> find_answer("the answer is 7", require_boxed=False)
    Extraction(kind='text', boxes=(), status=None)
    >>> find_answer("\\\\b\\u043exed{7}", require_boxed=False).status     # Cyrillic 'o'
    'spoofed'
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# A box command spelled in ASCII, not the prefix of a longer command name (``\boxedx``).
_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Fenced code: three or more backticks or tildes up to the same fence again, or to the end.
_FENCED_CODE = re.compile(r"(`{3,}|~{3,})[\s\S]*?(?:\1|\Z)")
# Inline code: a run of backticks up to the next run of exactly as many.
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)[\s\S]*?(?<!`)\1(?!`)")

# Characters a reader takes for a backslash (NFKC already maps the full-width and small forms).
_BACKSLASH_LOOKALIKES = "\u2216\u29f5\u29f9\u2572\u3035"
# Letters of other scripts that look like the ASCII letters of ``boxed``/``fbox`` (Unicode's
# confusables list, restricted to those letters; NFKC covers full-width and mathematical letters).
_LETTER_LOOKALIKES = {
    "b": "\u042c\u044c\u0185\u13cf\u15af\u0184",
    "o": "\u043e\u03bf\u0585\u03c3\u1d0f\u0ed0\u0c66\u0d20\u101d\u2c9f\u0555",
    "x": "\u0445\u03c7\u00d7\u1541\u2179\u166e\u2a2f\u0425\u03a7",
    "e": "\u0435\u04bd\u212e\u1971\uab32\u0415\u0395",
    "d": "\u0501\u217e\u13e7\u146f\ua4d2",
    "f": "\u0192\u1e9d\ua799\u0493",
}
_SKELETON_MAP = str.maketrans(
    {**{c: "\\" for c in _BACKSLASH_LOOKALIKES}, **{c: ascii_ for ascii_, cs in _LETTER_LOOKALIKES.items() for c in cs}}
)


@dataclass(frozen=True)
class Extraction:
    """Where the answer is.

    ``kind`` is ``"box"`` (``boxes`` holds the distinct box contents, whitespace ignored, the answer
    last), ``"text"`` (no box: math-verify looks for the answer in ``text``) or ``"none"``
    (``status`` says why it scores 0).
    """

    kind: str
    boxes: tuple[str, ...] = ()
    status: str | None = None
    text: str = ""

    def __repr__(self) -> str:  # the text can be long; the doctest shows the decision only
        return f"Extraction(kind={self.kind!r}, boxes={self.boxes!r}, status={self.status!r})"


def strip_code(text: str) -> str:
    """``text`` with markdown code blocks and inline code spans replaced by a space."""
    return _INLINE_CODE.sub(" ", _FENCED_CODE.sub(" ", text))


def reader_skeleton(text: str) -> str:
    """``text`` as a reader sees it: NFKC, no invisible format characters, look-alikes folded to ASCII."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    # Strip combining marks (a dotted or accented letter still reads as the letter).
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.translate(_SKELETON_MAP)


def has_spoofed_box(text: str) -> bool:
    """True when a reader would see more ``\\boxed``/``\\fbox`` in ``text`` than it really has."""
    if text.isascii():
        return False
    return len(_BOX_TOKEN.findall(reader_skeleton(text))) > len(_BOX_TOKEN.findall(text))


def _brace_group(text: str, start: int) -> int | None:
    """End index (after the closing brace) of the balanced group opening at ``text[start] == "{"``."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # an escaped character (``\{``, ``\}``, ``\\``) never opens or closes a group
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def box_contents(text: str) -> list[str] | None:
    """The contents of every box in ``text`` in order, or None when a box is malformed (no closed
    brace group, or a box inside a box). Empty contents are returned as ``""``."""
    contents: list[str] = []
    pos = 0
    while (match := _BOX_TOKEN.search(text, pos)) is not None:
        start = match.end()
        while start < len(text) and text[start] in " \t\r\n":
            start += 1
        if start >= len(text) or text[start] != "{":
            return None
        end = _brace_group(text, start)
        if end is None:
            return None
        content = text[start + 1 : end - 1]
        if _BOX_TOKEN.search(content):
            return None
        contents.append(content)
        pos = end
    return contents


def find_answer(response: str, require_boxed: bool) -> Extraction:
    """Apply the module's extraction rule to one response (see the module docstring)."""
    text = strip_code(response)
    if has_spoofed_box(text):
        return Extraction("none", status="spoofed")
    if _BOX_TOKEN.search(text):
        contents = box_contents(text)
        if contents is None or not contents[-1].strip():
            return Extraction("none", status="unparsed")
        # Distinct answers, the last (the answer) first, each once; whitespace does not count.
        distinct: dict[str, str] = {}
        for content in reversed(contents):
            distinct.setdefault("".join(content.split()), content.strip())
        return Extraction("box", boxes=tuple(reversed(list(distinct.values()))))
    if require_boxed:
        return Extraction("none", status="no_box")
    return Extraction("text", text=text)
