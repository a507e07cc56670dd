"""Pure: the section tree of a standard (InfoUnits) from its own structure.

Sources of structure, in this order of preference:

* Markdown ATX headings (``## Title``), skipping fenced code blocks, with kramdown-RFC
  anchors (``# ACK Frames {#frame-ack}``) and kramdown-RFC's implicit numbering (``--- middle``
  sections are 1, 2, ...; ``--- back`` sections are appendices A, B, ...);
* numbered plain-text headings (``5.2.1 Title``, ``Annex A (normative): Title``, ``A.1 Title``);
* an outline given by the caller (a PDF table of contents, see ``standards/pdf.py``).

Every section keeps exact character offsets into the document text: ``start`` (heading line),
``body_start`` (after the heading line) and ``end`` (the next heading of any level). A section's
own text is ``text[start:end]``; its subsections are separate sections. Only the standard
library here, no ``llama_index``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)

ROOT_KEY = "root"


@dataclass
class Section:
    """One InfoUnit: a section with its number, title, place in the tree and char span."""

    key: str
    number: str
    title: str
    level: int
    start: int
    body_start: int
    end: int
    parent: Optional[str] = None
    anchor: Optional[str] = None
    children: List[str] = field(default_factory=list)


@dataclass
class SectionTree:
    """The sections of one document, in document order, root first."""

    sections: List[Section]
    warnings: List[str] = field(default_factory=list)
    source: str = "markdown"
    block_anchors: Dict[str, str] = field(default_factory=dict)  # figure/table anchor -> section key

    def __post_init__(self) -> None:
        self.by_key: Dict[str, Section] = {s.key: s for s in self.sections}

    def by_number(self) -> Dict[str, str]:
        """Section number -> key (first occurrence wins for duplicate numbers)."""
        out: Dict[str, str] = {}
        for s in self.sections:
            if s.number and s.number not in out:
                out[s.number] = s.key
        return out

    def by_anchor(self) -> Dict[str, str]:
        return {s.anchor: s.key for s in self.sections if s.anchor}

    def path(self, key: str) -> List[str]:
        """Keys from the root down to ``key``."""
        out: List[str] = []
        cur: Optional[str] = key
        while cur is not None:
            out.append(cur)
            cur = self.by_key[cur].parent
        return out[::-1]

    def section_at(self, offset: int) -> str:
        """Key of the section whose own text contains char ``offset``."""
        best = ROOT_KEY
        for s in self.sections:
            if s.start <= offset < s.end:
                best = s.key
        return best


# ---------------------------------------------------------------------------------------
# fenced blocks, tables, front matter
# ---------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})")


def _lines(text: str) -> List[Tuple[int, str]]:
    """(offset, line without newline) for every line."""
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        out.append((pos, line.rstrip("\r\n")))
        pos += len(line)
    return out


def fenced_ranges(text: str) -> List[Tuple[int, int]]:
    """Char ranges ``[start, end)`` of fenced code blocks (``` or ~~~); unclosed runs to the end."""
    out: List[Tuple[int, int]] = []
    open_at: Optional[int] = None
    fence = ""
    for off, line in _lines(text):
        m = _FENCE_RE.match(line)
        if open_at is None:
            if m:
                open_at, fence = off, m.group(1)
        elif (
            m
            and m.group(1)[0] == fence[0]
            and len(m.group(1)) >= len(fence)
            and not line.strip()[len(m.group(1)) :].strip()
        ):
            out.append((open_at, off + len(line)))
            open_at = None
    if open_at is not None:
        out.append((open_at, len(text)))
    return out


def _inside(offset: int, ranges: Sequence[Tuple[int, int]]) -> bool:
    return any(a <= offset < b for a, b in ranges)


def table_ranges(text: str, start: int = 0, end: Optional[int] = None) -> List[Tuple[int, int]]:
    """Runs of Markdown/grid table lines (starting with ``|`` or ``+-``) in ``[start, end)``."""
    end = len(text) if end is None else end
    out: List[Tuple[int, int]] = []
    run: Optional[int] = None
    last_end = start
    for off, line in _lines(text[start:end]):
        s = line.lstrip()
        is_row = s.startswith("|") or s.startswith("+-") or s.startswith("+=")
        if is_row and run is None:
            run = start + off
        if not is_row and run is not None:
            out.append((run, last_end))
            run = None
        last_end = start + off + len(line)
    if run is not None:
        out.append((run, last_end))
    return out


def front_matter_span(text: str) -> Optional[Tuple[int, int]]:
    """``(start, end)`` of a YAML front matter body when the text starts with ``---``."""
    if not text.startswith("---"):
        return None
    first_nl = text.find("\n")
    if first_nl < 0 or text[:first_nl].strip() != "---":
        return None
    m = re.compile(r"^---", re.M).search(text, first_nl + 1)
    return (first_nl + 1, m.start() if m else len(text))


# ---------------------------------------------------------------------------------------
# anchors and numbers
# ---------------------------------------------------------------------------------------

_ANCHOR_SUFFIX_RE = re.compile(r"\s*\{:?\s*#([^}\s]+)[^}]*\}\s*$")
_HTML_ANCHOR_RE = re.compile(r"<\w+[^>]*\banchor=\"([^\"]+)\"")
_IAL_RE = re.compile(r"^\{:\s*#([A-Za-z][\w\-.:]*)")
_NUMBER_PREFIX_RE = re.compile(
    r"^(?:(?P<kw>Annex|Appendix)\s+(?P<letter>[A-Z])(?:\s*\((?P<status>normative|informative)\))?"
    r"\s*[:.\-\u2013\u2014]?\s*|(?P<num>\d+(?:\.\d+)*|[A-Z](?:\.\d+)+)\.?\s+)(?P<title>.*)$"
)


def kramdown_anchor(title: str) -> str:
    """The id kramdown derives from a heading title (its ``auto_ids`` rule)."""
    s = re.sub(r"^[^a-zA-Z]+", "", title)
    s = re.sub(r"[^a-zA-Z0-9 \-]", "", s)
    return s.replace(" ", "-").lower()


def number_key(number: str) -> Tuple[int, ...]:
    """Sortable key of a section number: ``"5.2.1"`` -> (5, 2, 1); annex letters after digits."""
    out: List[int] = []
    for part in number.split("."):
        if part.isdigit():
            out.append(int(part))
        elif len(part) == 1 and part.isalpha():
            out.append(10_000 + ord(part.upper()))
        else:
            out.append(0)
    return tuple(out)


def split_heading_number(heading: str) -> Tuple[str, str]:
    """``"5.2 Title"`` -> ("5.2", "Title"); ``"Annex A (normative): X"`` -> ("A", "X")."""
    m = _NUMBER_PREFIX_RE.match(heading.strip())
    if not m or not m.group("title").strip() and not m.group("letter"):
        return "", heading.strip()
    number = m.group("letter") or m.group("num") or ""
    return number, m.group("title").strip()


def _letters(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(65 + r) + s
    return s


# ---------------------------------------------------------------------------------------
# tree building
# ---------------------------------------------------------------------------------------


@dataclass
class Heading:
    """A heading found in the text: where it is, its depth, number (may be empty) and title."""

    start: int
    body_start: int
    level: int
    title: str
    number: str = ""
    anchor: Optional[str] = None


def build_tree(
    text: str,
    headings: Sequence[Heading],
    root_title: str = "",
    source: str = "markdown",
    implicit_numbers: bool = False,
    back_matter_at: Optional[int] = None,
) -> SectionTree:
    """Section tree from headings in document order.

    The parent of a heading is the nearest earlier heading of a smaller level. With
    ``implicit_numbers`` headings without a number are numbered by counting (``1``, ``1.2``;
    after ``back_matter_at``, top-level sections are appendices ``A``, ``B``). Duplicate
    numbers get keys ``"5.2~2"``, ``"5.2~3"`` and a warning.
    """
    warnings: List[str] = []
    first = headings[0].start if headings else len(text)
    root = Section(ROOT_KEY, "", root_title, 0, 0, 0, first)
    sections: List[Section] = [root]
    stack: List[Tuple[int, Section]] = [(0, root)]
    child_count: Dict[str, int] = {}
    back_count = 0
    seen: Dict[str, int] = {}
    for i, h in enumerate(headings):
        end = headings[i + 1].start if i + 1 < len(headings) else len(text)
        while stack and stack[-1][0] >= h.level:
            stack.pop()
        parent = stack[-1][1]
        number = h.number
        if not number and implicit_numbers:
            if parent.key == ROOT_KEY and back_matter_at is not None and h.start >= back_matter_at:
                number = _letters(back_count)
                back_count += 1
            else:
                child_count[parent.key] = child_count.get(parent.key, 0) + 1
                n = child_count[parent.key]
                number = f"{parent.number}.{n}" if parent.number else str(n)
        key = number or f"u{i + 1}"
        if key in seen:
            seen[key] += 1
            warnings.append(
                f"duplicate section number {number!r} at char {h.start} ({h.title!r}); "
                f"kept as key {key}~{seen[key]}, and citations of {number!r} go to the first one."
            )
            key = f"{key}~{seen[key]}"
        else:
            seen[key] = 1
        sec = Section(key, number, h.title, len(stack), h.start, h.body_start, end, parent.key, h.anchor)
        parent.children.append(key)
        sections.append(sec)
        stack.append((h.level, sec))
    for w in warnings:
        logger.warning(w)
    return SectionTree(sections, warnings, source)


def markdown_headings(text: str) -> Tuple[List[Heading], Optional[int], List[Tuple[str, int]]]:
    """ATX headings outside fenced blocks and front matter, the ``--- back`` offset, and IAL anchors.

    Returns ``(headings, back_matter_offset, [(anchor, offset)])``. The anchor list holds
    kramdown block anchors (``{: #fig-x title="..."}``) so citations of figures resolve to
    the section that holds them.
    """
    fences = fenced_ranges(text)
    fm = front_matter_span(text)
    heads: List[Heading] = []
    ials: List[Tuple[str, int]] = []
    back: Optional[int] = None
    for off, line in _lines(text):
        if fm and off < fm[1]:
            continue
        if _inside(off, fences):
            continue
        if line.startswith("--- back"):
            back = off
            continue
        m_ial = _IAL_RE.match(line)
        if m_ial:
            ials.append((m_ial.group(1), off))
            continue
        for m_html in _HTML_ANCHOR_RE.finditer(line):
            ials.append((m_html.group(1), off))
        m = re.match(r"^(#{1,6})[ \t]+(.+?)[ \t]*$", line)
        if not m:
            continue
        raw = re.sub(r"[ \t]+#+$", "", m.group(2))
        anchor = None
        am = _ANCHOR_SUFFIX_RE.search(raw)
        if am:
            anchor = am.group(1)
            raw = raw[: am.start()].rstrip()
        number, title = split_heading_number(raw)
        body_start = off + len(line) + (1 if off + len(line) < len(text) else 0)
        heads.append(Heading(off, body_start, len(m.group(1)), title, number, anchor))
    return heads, back, ials


def parse_markdown(text: str, root_title: str = "") -> SectionTree:
    """Section tree of a Markdown (or kramdown-RFC) document.

    Headings without an explicit number are numbered implicitly, as kramdown-RFC does, and
    headings without ``{#anchor}`` get kramdown's derived anchor.
    """
    heads, back, ials = markdown_headings(text)
    explicit = any(h.number for h in heads)
    for h in heads:
        if h.anchor is None:
            h.anchor = kramdown_anchor(h.title)
    tree = build_tree(text, heads, root_title, "markdown", implicit_numbers=not explicit, back_matter_at=back)
    tree.block_anchors = {a: tree.section_at(o) for a, o in ials}
    return tree


_PLAIN_NUM_RE = re.compile(r"^[ ]{0,3}(?P<num>\d+(?:\.\d+)*|[A-Z](?:\.\d+)+)\.?[ \t]+(?P<title>\S.*?)[ \t]*$")
_PLAIN_ANNEX_RE = re.compile(
    r"^[ ]{0,3}(?P<kw>Annex|Appendix|ANNEX|APPENDIX)[ \t]+(?P<letter>[A-Z])\b(?:[ \t]*\((?P<status>normative|informative)\))?"
    r"[ \t]*[:.\-\u2013\u2014]?[ \t]*(?P<title>.*?)[ \t]*$"
)
_TOC_LINE_RE = re.compile(r"(\.{4,}|\u2026{2,}|[ \t]{3,})\s*\d+\s*$")


def _plausible_title(title: str) -> bool:
    if not title or not (title[0].isupper() or title[0].isdigit()):
        return False
    if title[-1] in ".,;:" or len(title) > 120 or len(title.split()) > 16:
        return False
    return not _TOC_LINE_RE.search(title)


def plaintext_headings(text: str) -> List[Heading]:
    """Numbered plain-text headings: ``5.2.1 Title``, ``A.1 Title``, ``Annex A (normative): Title``.

    A numbered line is a heading when its title looks like one (capitalised, short, no
    final punctuation, not a table-of-contents line) and its number does not go backwards
    from the previous heading (so numbered lists inside a section are not headings).
    An equal number is kept as a duplicate (reported by :func:`build_tree`).
    """
    heads: List[Heading] = []
    last: Tuple[int, ...] = ()
    for off, line in _lines(text):
        if not line.strip() or _TOC_LINE_RE.search(line):
            continue
        number = title = ""
        m = _PLAIN_ANNEX_RE.match(line)
        if m:
            number, title = m.group("letter"), m.group("title") or f"Annex {m.group('letter')}"
        else:
            m2 = _PLAIN_NUM_RE.match(line)
            if not m2 or not _plausible_title(m2.group("title")):
                continue
            number, title = m2.group("num"), m2.group("title")
        k = number_key(number)
        if last and k < last:
            continue
        last = k
        level = len(number.split("."))
        body_start = off + len(line) + (1 if off + len(line) < len(text) else 0)
        heads.append(Heading(off, body_start, level, title.strip(), number, None))
    return heads


def parse_plaintext(text: str, root_title: str = "") -> SectionTree:
    """Section tree of a plain-text standard from its numbered headings.

    The level of ``5.2.1`` is 3, so the tree follows the numbers even when a level is
    skipped. With no heading at all the tree is a single root (and a warning).
    """
    return build_tree(text, plaintext_headings(text), root_title, "plaintext")


def parse_outline(text: str, outline: Sequence[Tuple[int, str, int]], root_title: str = "") -> SectionTree:
    """Section tree from an outline: ``(level, title, char_offset)`` items in order.

    Numbers are taken from the titles (``"5.2 Title"``); titles without one stay unnumbered.
    """
    heads: List[Heading] = []
    for level, raw, off in sorted(outline, key=lambda t: t[2]):
        number, title = split_heading_number(raw)
        nl = text.find("\n", off)
        line_end = len(text) if nl < 0 else nl + 1
        heads.append(Heading(off, line_end, level, title, number, None))
    return build_tree(text, heads, root_title, "outline")


def detect_format(text: str) -> str:
    """``"markdown"`` if the text has front matter or an ATX heading outside fences, else ``"plaintext"``."""
    if front_matter_span(text) is not None:
        return "markdown"
    heads, _, _ = markdown_headings(text)
    return "markdown" if heads else "plaintext"
