"""Pure text helpers for HCQR: key terms, answer options. Standard library only."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from llama_index_ext_causalrag.text.sentences import QUESTION_STOPWORDS, WORD
from llama_index_ext_causalrag.text.spans import span_overlap  # noqa: F401  (re-exported)

_WORD = WORD
STOPWORDS = QUESTION_STOPWORDS

# Options whose text carries no content terms: retrieval cannot rank them.
POLAR_OPTIONS = frozenset({"yes", "no", "maybe", "true", "false", "none", "all", "both"})

OptionsInput = Union[Mapping[str, Any], Sequence[Any], None]

_OPTION_LINE = re.compile(r"^\s*\(?([A-Ha-h])[\.\):]\s+(.+?)\s*$")


def key_terms(text: str, max_terms: Optional[int] = None) -> List[str]:
    """Content words of ``text`` in first-seen order, lower-cased, deduplicated.

    Drops stopwords and one-character tokens (but keeps numbers such as ``0.5``'s parts).
    """
    seen: Dict[str, None] = {}
    for tok in _WORD.findall(text.lower()):
        tok = tok.strip("-'")
        if len(tok) < 2 and not tok.isdigit():
            continue
        if tok in STOPWORDS or tok in seen:
            continue
        seen[tok] = None
        if max_terms is not None and len(seen) >= max_terms:
            break
    return list(seen)


def normalize_options(options: OptionsInput) -> Dict[str, str]:
    """Options as ``{letter: text}``: a mapping is kept (values as str), a list gets A, B, ...

    Raises ``ValueError`` naming the value for anything else.
    """
    if options is None:
        return {}
    if isinstance(options, Mapping):
        out = {str(k).strip(): str(v).strip() for k, v in options.items() if v is not None}
        return {k: v for k, v in out.items() if v}
    if isinstance(options, (list, tuple)):
        if len(options) > 26:
            raise ValueError(f"got {len(options)} options; at most 26 (A-Z) are supported.")
        return {chr(65 + i): str(v).strip() for i, v in enumerate(options) if str(v).strip()}
    raise ValueError(
        f"options must be a mapping {{letter: text}} or a list of texts, got {type(options).__name__} "
        f"{options!r}; e.g. options={{'A': 'aspirin', 'B': 'heparin'}}."
    )


def split_inline_options(text: str) -> Tuple[str, Dict[str, str]]:
    """Split ``"stem\\nA. x\\nB. y"`` into the stem and ``{"A": "x", "B": "y"}``.

    Needs at least two consecutive letter lines starting at A; otherwise returns
    ``(text, {})`` unchanged.
    """
    lines = text.splitlines()
    opts: Dict[str, str] = {}
    first = None
    for i, line in enumerate(lines):
        m = _OPTION_LINE.match(line)
        if m and m.group(1).upper() == chr(65 + len(opts)):
            if first is None:
                first = i
            opts[m.group(1).upper()] = m.group(2)
        elif opts:
            break
    if len(opts) < 2 or first is None:
        return text, {}
    return "\n".join(lines[:first]).strip(), opts


def options_are_polar(options: Mapping[str, str]) -> bool:
    """True when every option is a bare yes/no/maybe-style word (no content terms)."""
    return bool(options) and all(
        not [t for t in _WORD.findall(v.lower()) if t not in POLAR_OPTIONS] for v in options.values()
    )


def format_options(options: Mapping[str, str]) -> str:
    return "\n".join(f"{k}. {v}" for k, v in options.items())
