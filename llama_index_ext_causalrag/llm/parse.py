"""Parsers of LLM answers shared by every LLM step: JSON objects (with salvage of output cut off
by a token limit), yes/no and decision-usefulness labels, and first-token log-probabilities.

Parsers raise ``ValueError`` on a malformed answer; the LLM layer (``llm_io``) retries once and
then lets the step degrade as it documents.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

DEFAULT_MAX_ANSWER_CHARS = 50_000
_FENCE = re.compile(r"```(?:json)?")


# ---- JSON objects in free text (linear-time scan, salvage of cut-off output) -------------
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
        except (json.JSONDecodeError, RecursionError):  # RecursionError: nesting deeper than json's limit
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
        except (json.JSONDecodeError, RecursionError):
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


# ---- answers --------------------------------------------------------------------------


def cap_answer(text: Optional[str], max_chars: int = DEFAULT_MAX_ANSWER_CHARS) -> str:
    """``text`` cut to ``max_chars`` characters (a runaway answer is not parsed whole)."""
    return (text or "")[:max_chars]


def parse_json_answer(text: str, keys: Set[str]) -> Tuple[Dict[str, Any], bool]:
    """``(object, was_cut_off)``: the JSON object of an answer having one of ``keys`` (salvaged
    when the answer was cut off). Raises ``ValueError`` naming the output otherwise."""
    obj, cut = find_or_salvage_json_object(text, keys)
    if obj is None or not keys & obj.keys():
        raise ValueError(f"no JSON object with {sorted(keys)} in LLM output: {text[:120]!r}")
    return obj, cut


def find_json_list(text: str) -> Optional[List[Any]]:
    """A bare JSON list in ``text`` (from its first ``[`` to its last ``]``, code fences
    tolerated), else ``None``."""
    import json

    t = (text or "").replace("```json", "").replace("```", "")
    start, end = t.find("["), t.rfind("]")
    if start < 0 or end < start:
        return None
    try:
        obj = json.loads(t[start : end + 1])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, list) else None


# ------------------------------------------------------------------------ labels
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
LABELS = ("entailed", "useful", "not_useful")
_NEG = r"(?:not|non|isn'?t|is\s+not)"
_LABEL_TOKEN = re.compile(
    rf"\b(?:(?P<neg>{_NEG})[\s_\-]*)?(?P<label>entailed|useful|not[\s_\-]*useful)\b", re.IGNORECASE
)
_LABEL_LINE = re.compile(r"^\W*label\W*[:=]\s*\W*(?P<rest>.*)$", re.IGNORECASE | re.MULTILINE)


def parse_yes_no(text: str) -> Tuple[bool, str]:
    """``(said_yes, reason)`` from "yes - reason" / "no: reason" or ``{"answer":..,"reason":..}``."""
    t = (text or "").strip()
    obj = find_json_object(t) if t.startswith("{") else None
    if obj is not None:
        t = f"{obj.get('answer', '')} - {obj.get('reason', '')}"
    m = _YES_NO.match(t)
    if not m:
        raise ValueError(f"answer starts with neither yes nor no: {text[:80]!r}")
    return m.group(1).lower() == "yes", t[m.end() :].strip(" -:.,\n")


def _labels_in(text: str) -> List[str]:
    out = []
    for m in _LABEL_TOKEN.finditer(text):
        word = re.sub(r"[\s_\-]+", "_", m.group("label").lower())
        if word.startswith("not") or (m.group("neg") and word == "useful"):
            out.append("not_useful")
        elif m.group("neg"):
            continue  # "not entailed" says what the context is not, not what it is
        else:
            out.append(word)
    return out


def parse_label(text: str) -> Optional[str]:
    """The judge's label (``entailed``/``useful``/``not_useful``), else None.

    An explicit ``label: X`` line wins, the last one when there are several; otherwise the first
    label that is not negated ("Not entailed; not useful" is ``not_useful``).
    """
    text = text or ""
    for m in reversed(list(_LABEL_LINE.finditer(text))):
        found = _labels_in(m.group("rest"))
        if found:
            return found[0]
    found = _labels_in(text)
    return found[0] if found else None


# -------------------------------------------------------------------- logprobs
def first_token_distributions(response: Any, positions: int = 3) -> List[Dict[str, float]]:
    """``{token: logprob}`` of the top tokens at the first ``positions`` answer positions, from
    LlamaIndex ``CompletionResponse.logprobs`` (OpenAI-style) or a llama.cpp raw
    ``choices[0].logprobs.top_logprobs``; ``[]`` when the LLM returned none."""
    out: List[Dict[str, float]] = []
    lps = getattr(response, "logprobs", None)
    if lps:
        for position in lps[:positions]:
            out.append({lp.token: lp.logprob for lp in position})
    raw = getattr(response, "raw", None)
    if not out and isinstance(raw, dict):
        try:
            top = raw["choices"][0]["logprobs"]["top_logprobs"]
            out = [dict(t) for t in top[:positions] if t]
        except (KeyError, IndexError, TypeError):
            pass
    return out


def p_yes_from_response(response: Any) -> Optional[float]:
    """P(yes) / (P(yes) + P(no)) at the first answer token, when the LLM returned logprobs, else None."""
    for dist in first_token_distributions(response):
        yes = sum(math.exp(v) for k, v in dist.items() if k.strip().lower() in ("yes", "y"))
        no = sum(math.exp(v) for k, v in dist.items() if k.strip().lower() in ("no", "n"))
        if yes + no > 0:
            return yes / (yes + no)
    return None


def label_probabilities(response: Any) -> Optional[Dict[str, float]]:
    """P(entailed), P(useful), P(not_useful) at the judge's first answer token, normalised over the
    three labels; None without logprobs or when no top token starts a label.

    A token counts for a label when one is a prefix of the other ("NOT" -> NOT_USEFUL, "ENTA" ->
    ENTAILED, "USE" -> USEFUL); the labels' first letters differ, so no token counts twice.
    """
    dists = first_token_distributions(response, positions=1)
    if not dists:
        return None
    mass = dict.fromkeys(LABELS, 0.0)
    for token, logprob in dists[0].items():
        tok = token.strip().upper().lstrip("*#`\"' ")
        if not tok:
            continue
        for label in LABELS:
            name = label.upper()
            if name.startswith(tok) or tok.startswith(name):
                mass[label] += math.exp(logprob)
    total = sum(mass.values())
    return {k: v / total for k, v in mass.items()} if total > 0 else None
