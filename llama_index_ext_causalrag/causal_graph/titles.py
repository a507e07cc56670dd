"""Title nodes for personalized PageRank over passages: each document title is a node, linked to
the units of its document and to every unit (and query) that names it.

Pure: strings in, integer edge arrays out, no ``llama_index`` import. Passage corpora such as
Wikipedia paragraphs name their bridge entities by the titles of other passages ("Forbidden
Ground is a film directed by Pál Gábor" -> the passage titled "Pál Gábor"); HippoRAG 2 (arXiv
2502.14802) finds these links with LLM OpenIE, this finds the ones spelled like a title, offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from llama_index_ext_causalrag.causal_graph.keyphrases import find_mentions, normalize_name

MAX_TITLE_WORDS = 6  # longer titles (paper titles, headings as sentences) are not named verbatim elsewhere
_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")  # "Mercury (planet)" is named "Mercury"


def title_key(title: Optional[str]) -> str:
    """The normalised key a title is found by (its trailing parenthesis dropped); "" when the
    title is missing, empty or longer than :data:`MAX_TITLE_WORDS` words."""
    if not title:
        return ""
    key = normalize_name(_QUALIFIER.sub("", title))
    return key if 0 < len(key.split()) <= MAX_TITLE_WORDS else ""


@dataclass(frozen=True)
class TitleLinks:
    """``keys``: title key -> title index (0..n_titles-1). Edges as arrays (m,): ``own_title`` /
    ``own_unit`` link a unit to its document's title, ``named_title`` / ``named_unit`` a unit to a
    title its text names (its own excluded)."""

    keys: Dict[str, int]
    own_title: np.ndarray
    own_unit: np.ndarray
    named_title: np.ndarray
    named_unit: np.ndarray

    @property
    def n(self) -> int:
        return len(self.keys)

    @property
    def max_words(self) -> int:
        return max((len(k.split()) for k in self.keys), default=1)

    def named_in(self, text: str) -> List[int]:
        """Indexes of the titles ``text`` names, sorted."""
        ids = {k: str(i) for k, i in self.keys.items()}
        return sorted(int(i) for i in find_mentions(text, ids, self.max_words))


def title_links(titles: Sequence[Optional[str]], texts: Sequence[str]) -> TitleLinks:
    """The title graph of units with these document ``titles`` and ``texts`` (same length)."""
    if len(titles) != len(texts):
        raise ValueError(f"titles and texts must have one length, got {len(titles)} and {len(texts)}.")
    keys: Dict[str, int] = {}
    own: List[int] = []
    for t in titles:
        k = title_key(t)
        if k:
            keys.setdefault(k, len(keys))
        own.append(keys[k] if k else -1)
    ids = {k: str(i) for k, i in keys.items()}
    max_words = max((len(k.split()) for k in keys), default=1)
    nt: List[int] = []
    nu: List[int] = []
    for u, text in enumerate(texts):
        for i in sorted(int(j) for j in find_mentions(text, ids, max_words)) if keys else ():
            if int(i) != own[u]:
                nt.append(int(i))
                nu.append(u)
    own_arr = np.asarray(own, dtype=np.int64)
    has = np.flatnonzero(own_arr >= 0)
    return TitleLinks(
        keys, own_arr[has], has.astype(np.int64), np.asarray(nt, dtype=np.int64), np.asarray(nu, dtype=np.int64)
    )


__all__ = ["MAX_TITLE_WORDS", "TitleLinks", "title_key", "title_links"]
