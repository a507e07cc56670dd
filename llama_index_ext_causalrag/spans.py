"""Pure helpers on character spans and on JSON in LLM output (standard library only)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional, Tuple

_FENCE = re.compile(r"```(?:json)?")


def span_overlap(a: Tuple[int, int], b: Tuple[int, int]) -> float:
    """Shared length of half-open spans ``a`` and ``b`` over the length of the shorter one
    (0 if disjoint or empty)."""
    inter = min(a[1], b[1]) - max(a[0], b[0])
    shorter = min(a[1] - a[0], b[1] - b[0])
    if inter <= 0 or shorter <= 0:
        return 0.0
    return inter / shorter


def find_json_object(text: str) -> Optional[Dict[str, Any]]:
    """The first balanced JSON object in ``text`` (code fences and prose around it, and braces
    inside strings, tolerated), else ``None``."""
    if not text:
        return None
    s = _FENCE.sub("", text)
    start = s.find("{")
    while start != -1:
        depth, in_str, esc = 0, False, False
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
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(s[start : j + 1])
                    except json.JSONDecodeError:
                        break
                    return obj if isinstance(obj, dict) else None
        start = s.find("{", start + 1)
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
    stack, in_str, esc = [], False, False
    cuts = []  # (end of the prefix, closers needed): the prefix ends after a complete element
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
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if not stack:
                break
            stack.pop()
            if not stack:
                return None  # balanced: not truncated
        elif c == ",":
            cuts.append((j, "".join(reversed(stack))))
    for end, closers in reversed(cuts):
        try:
            obj = json.loads(s[start:end] + closers)
        except json.JSONDecodeError:
            continue
        return obj if isinstance(obj, dict) and obj else None
    return None
