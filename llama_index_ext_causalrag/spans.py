"""Pure helpers on character spans and on JSON in LLM output (standard library only)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

_FENCE = re.compile(r"```(?:json)?")


def span_overlap(a: Tuple[int, int], b: Tuple[int, int]) -> float:
    """Shared length of half-open spans ``a`` and ``b`` over the length of the shorter one
    (0 if disjoint or empty)."""
    inter = min(a[1], b[1]) - max(a[0], b[0])
    shorter = min(a[1] - a[0], b[1] - b[0])
    if inter <= 0 or shorter <= 0:
        return 0.0
    return inter / shorter


def _outside_strings(s: str, start: int) -> Iterator[Tuple[int, str]]:
    """``(index, char)`` of the characters of ``s`` from ``start`` on that are not inside a JSON
    string (quotes and escapes are consumed here)."""
    in_str, esc = False, False
    for j in range(start, len(s)):
        c = s[j]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        else:
            yield j, c


MAX_PARSE_ATTEMPTS = 64  # json.loads tries per answer: bounds the work on adversarial output


def _balanced_spans(s: str, start: int) -> List[Tuple[int, int]]:
    """Every balanced ``{...}`` span of ``s`` from ``start`` on, sorted by start, in one pass
    (braces inside JSON strings ignored; an unclosed ``{`` costs nothing)."""
    stack: List[int] = []
    spans: List[Tuple[int, int]] = []
    for j, c in _outside_strings(s, start):
        if c == "{":
            stack.append(j)
        elif c == "}" and stack:
            spans.append((stack.pop(), j + 1))
    spans.sort()
    return spans


def find_json_object(text: str) -> Optional[Dict[str, Any]]:
    """The first balanced JSON object in ``text`` (code fences and prose around it, and braces
    inside strings, tolerated), else ``None``. Linear in ``len(text)`` up to a bounded number
    of ``json.loads`` attempts."""
    if not text:
        return None
    s = _FENCE.sub("", text)
    start = s.find("{")
    if start == -1:
        return None
    for a, b in _balanced_spans(s, start)[:MAX_PARSE_ATTEMPTS]:
        try:
            obj = json.loads(s[a:b])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def parse_json_object(text: str) -> Dict[str, Any]:
    """Like :func:`find_json_object`, but raises ``ValueError`` naming the output when there is
    no JSON object in it (callers retry, then degrade)."""
    obj = find_json_object(text)
    if obj is None:
        raise ValueError(f"no well-formed JSON object in LLM output: {text[:120]!r}")
    return obj


def salvage_truncated_json(text: str) -> Optional[Dict[str, Any]]:
    """The complete members of a JSON object that was cut off (an LLM hit its token limit),
    else ``None``.

    The object is closed after its last complete element, at any depth: from
    ``{"a": "x", "b": {"c": "y", "d": "tr`` it returns ``{"a": "x", "b": {"c": "y"}}``.
    A balanced object, if there is one, is :func:`find_json_object`'s job.
    """
    if not text:
        return None
    s = _FENCE.sub("", text)
    start = s.find("{")
    if start == -1:
        return None
    stack: List[str] = []
    cuts = []  # (end of the prefix, closers needed): the prefix ends after a complete element
    for j, c in _outside_strings(s, start):
        if c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if not stack:
                break
            stack.pop()
            if not stack:
                return None  # balanced: not truncated
        elif c == ",":
            cuts.append((j, "".join(reversed(stack))))
    for end, closers in list(reversed(cuts))[:MAX_PARSE_ATTEMPTS]:
        try:
            obj = json.loads(s[start:end] + closers)
        except json.JSONDecodeError:
            continue
        return obj if isinstance(obj, dict) and obj else None
    return None


def find_or_salvage_json_object(text: str, keys: Set[str]) -> Tuple[Optional[Dict[str, Any]], bool]:
    """``(object, was_cut_off)``: the first balanced JSON object in ``text`` that has one of
    ``keys``; else, when the output was cut off by a token limit (whose first balanced object
    is then a nested one, or none), its salvaged complete members if they have one of ``keys``;
    else the first balanced object, if any, for the caller to reject."""
    obj = find_json_object(text)
    if obj is not None and keys & obj.keys():
        return obj, False
    cut = salvage_truncated_json(text)
    if cut is not None and keys & cut.keys():
        return cut, True
    return obj, False
