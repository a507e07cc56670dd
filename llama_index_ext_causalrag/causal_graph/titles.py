"""Title nodes for personalized PageRank over passages: each document title is a node, linked to
the units of its document and to every unit (and query) that names it.

Pure: strings in, integer edge arrays out, no ``llama_index`` import. Passage corpora such as
Wikipedia paragraphs name their bridge entities by the titles of other passages ("Forbidden
Ground is a film directed by Pál Gábor" -> the passage titled "Pál Gábor"); HippoRAG 2 (arXiv
2502.14802) finds these links with LLM OpenIE, this finds the ones spelled like a title, offline.

:func:`title_bridge_order` ranks units by their dense score plus one step along these links: a
unit gains when the query names its title, or when one of the query's best units names it (the
second hop of a multi-hop question).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

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

    def __post_init__(self) -> None:
        units_of: Dict[int, List[int]] = {}
        for t, u in zip(self.own_title.tolist(), self.own_unit.tolist()):
            units_of.setdefault(t, []).append(u)
        named_by: Dict[int, List[int]] = {}
        for t, u in zip(self.named_title.tolist(), self.named_unit.tolist()):
            named_by.setdefault(u, []).append(t)
        object.__setattr__(self, "_units_of", units_of)
        object.__setattr__(self, "_named_by", named_by)

    def units_of(self, title: int) -> List[int]:
        """The units whose document has title ``title``."""
        return self._units_of.get(title, [])  # type: ignore[attr-defined]

    def titles_named_by(self, unit: int) -> List[int]:
        """The titles unit ``unit`` names (its own excluded)."""
        return self._named_by.get(unit, [])  # type: ignore[attr-defined]

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


def present_title_links(nodes: Sequence[Any]) -> TitleLinks:
    """:func:`title_links` of units given as nodes (their ``metadata["title"]`` and
    ``get_content()``); a ``None`` (a unit gone from its store) has no title and names none."""
    return title_links(
        [n.metadata.get("title") if n is not None else None for n in nodes],
        [n.get_content() if n is not None else "" for n in nodes],
    )


def title_bridge_order(
    dense: np.ndarray,
    links: TitleLinks,
    query_titles: Sequence[int],
    sources: int,
    bridge_weight: float,
    query_weight: float,
    keep: int = 1,
) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(order, f)``: unit positions ranked by one step over the title links and every unit's
    score ``f`` (n_units,), or ``None`` when neither the query nor its ``sources`` best units name
    a title (nothing to bridge).

    ``dense`` (n_units,): the units' query similarity (``-inf``: not scored or filtered out), scaled
    here to ``d = max(dense, 0) / max(dense)``. A unit's score is

        f(u) = d(u) + query_weight * [the query names u's title]
                    + bridge_weight * max over sources q naming u's title of d(q)

    where the sources are the ``sources`` best units by ``d`` and the units titled by the query
    (a comparison question naming two films reaches both films, then each film's director). The
    ``keep`` best units by ``d`` stay first; the rest follow by ``f``, ties by ``d``. Units with
    ``dense = -inf`` are not returned.
    """
    d = np.asarray(dense, dtype=np.float64)
    if d.ndim != 1:
        raise ValueError(f"dense must be one score per unit (1-D), got shape {d.shape}.")
    for name, v in (("sources", sources), ("keep", keep)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}.")
    ok = np.isfinite(d)
    if not ok.any():
        return None
    top = float(d[ok].max())
    dn = np.where(ok, np.maximum(d, 0.0), 0.0) / (top if top > 0 else 1.0)
    by_dense = np.argsort(-np.where(ok, d, -np.inf), kind="stable")
    titled = sorted({u for t in query_titles for u in links.units_of(int(t)) if ok[u]})
    bridge = np.zeros_like(dn)
    for q in by_dense[:sources].tolist() + titled:
        for t in links.titles_named_by(q):
            for u in links.units_of(t):
                bridge[u] = max(bridge[u], dn[q])
    if not titled and not bridge.any():
        return None
    f = dn + bridge_weight * bridge
    f[titled] += query_weight
    first = f.copy()
    first[by_dense[: min(keep, int(ok.sum()))]] = np.inf
    order = np.lexsort((-dn, -first))
    return order[ok[order]], f


__all__ = ["MAX_TITLE_WORDS", "TitleLinks", "present_title_links", "title_bridge_order", "title_key", "title_links"]
