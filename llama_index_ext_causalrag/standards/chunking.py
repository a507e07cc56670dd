"""Pure: split a long section into chunks of at most ``max_tokens`` tokens, never inside a table.

Standard library only; the token counter is passed in (the parser uses ``tokens.count_tokens``).
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional, Tuple

from llama_index_ext_causalrag.standards.structure import fenced_ranges, table_ranges


def _blocks(text: str, start: int, end: int) -> List[Tuple[int, int, bool]]:
    """Paragraph-ish blocks of ``text[start:end]`` as ``(s, e, atomic)``; tables and fences are atomic."""
    atomic = [(a, b) for a, b in fenced_ranges(text[start:end])]
    atomic = [(start + a, start + b) for a, b in atomic]
    atomic += table_ranges(text, start, end)
    atomic.sort()
    out: List[Tuple[int, int, bool]] = []
    pos = start
    for a, b in atomic + [(end, end)]:
        a, b = max(a, pos), min(b, end)
        if a < pos:
            continue
        seg = text[pos:a]
        p = pos
        for part in re.split(r"(\n[ \t]*\n)", seg):
            if part.strip() and not re.fullmatch(r"\n[ \t]*\n", part):
                out.append((p, p + len(part), False))
            p += len(part)
        if b > a:
            out.append((a, b, True))
        pos = max(pos, b)
    return out


def _split_long(text: str, s: int, e: int, max_tokens: int, count: Callable[[str], int]) -> List[Tuple[int, int]]:
    """Split one over-long paragraph at sentence ends, else at spaces."""
    pieces: List[Tuple[int, int]] = []
    # Not text.sentences.split_sentence_spans (Punkt): on the QUIC RFC excerpts its sentences
    # differ in 29 of 1314 paragraphs ("ins: M. Thomson" is one sentence for Punkt, two here).
    bounds = [s] + [s + m.end() for m in re.finditer(r"(?<=[.!?])\s+", text[s:e])] + [e]
    units = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]
    fine: List[Tuple[int, int]] = []
    for a, b in units:
        if count(text[a:b]) <= max_tokens:
            fine.append((a, b))
            continue
        wb = [a] + [a + m.end() for m in re.finditer(r"\s+", text[a:b])] + [b]
        cur = a
        for i in range(1, len(wb)):
            if count(text[cur : wb[i]]) > max_tokens and wb[i - 1] > cur:
                fine.append((cur, wb[i - 1]))
                cur = wb[i - 1]
        fine.append((cur, b))
    cur_s, cur_e = fine[0]
    for a, b in fine[1:]:
        if count(text[cur_s:b]) <= max_tokens:
            cur_e = b
        else:
            pieces.append((cur_s, cur_e))
            cur_s, cur_e = a, b
    pieces.append((cur_s, cur_e))
    return pieces


def chunk_spans(text: str, start: int, end: int, max_tokens: int, count: Callable[[str], int]) -> List[Tuple[int, int]]:
    """Split ``text[start:end]`` into spans of at most ``max_tokens`` tokens.

    Greedy packing of whole paragraphs; a paragraph longer than the limit is split at
    sentence ends. Tables and fenced blocks are never split, even when longer than the
    limit (such a chunk is over size). Spans are exact offsets, trailing whitespace trimmed.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}.")
    if count(text[start:end]) <= max_tokens:
        return [(start, end)]
    spans: List[Tuple[int, int]] = []
    cur: Optional[Tuple[int, int]] = None
    for a, b, atomic in _blocks(text, start, end):
        if cur is not None and count(text[cur[0] : b]) <= max_tokens:
            cur = (cur[0], b)
            continue
        if cur is not None:
            spans.append(cur)
            cur = None
        if atomic or count(text[a:b]) <= max_tokens:
            cur = (a, b)
        else:
            parts = _split_long(text, a, b, max_tokens, count)
            spans.extend(parts[:-1])
            cur = parts[-1]
    if cur is not None:
        spans.append(cur)
    if spans:
        spans[0] = (start, spans[0][1])  # the first chunk keeps the heading line
    out: List[Tuple[int, int]] = []
    for a, b in spans:
        while b > a + 1 and text[b - 1].isspace():
            b -= 1
        out.append((a, b))
    return out
