"""Pure helpers of :class:`CausalBridgeRetriever`: which units may enter the bridge share of the
budget, and how much evidence each of their sentences holds. No ``llama_index`` import."""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Set, Tuple

import numpy as np


def pick_bridge_units(
    scores: Mapping[int, float],
    relative: Mapping[int, float],
    docs: Sequence[str],
    covered: Set[str],
    *,
    max_docs: int,
    min_relative: float = 0.0,
) -> List[Tuple[float, int]]:
    """``(score, unit)`` pairs, best score first (ties: lower unit), of the units whose document
    ``docs[unit]`` is not in ``covered`` and whose ``relative[unit]`` text score is at least
    ``min_relative``, from the first ``max_docs`` documents met in that order.

    Coverage across documents rather than more of the covered ones: the reserved share of the
    budget only ever holds documents the first stage left out.
    """
    picked: List[Tuple[float, int]] = []
    admitted: Dict[str, int] = {}
    for u, sc in sorted(scores.items(), key=lambda x: (-x[1], x[0])):
        d = docs[u]
        if d in covered or relative.get(u, 0.0) < min_relative:
            continue
        if d not in admitted:
            if len(admitted) >= max_docs:
                continue
            admitted[d] = len(admitted)
        picked.append((float(sc), int(u)))
    return picked


def sentence_evidence(
    sentence_terms: Sequence[Set[str]],
    query_terms: Set[str],
    sentence_texts: Sequence[str],
    entity_weights: Mapping[str, float],
) -> np.ndarray:
    """Evidence of each sentence, shape ``(n_sentences,)``: the share of ``query_terms`` among its
    terms, plus the weight of every reached entity name (lower case) its lower-cased text
    contains. Zero for a sentence that holds neither."""
    ev = np.zeros(len(sentence_terms), dtype=np.float64)
    nq = len(query_terms)
    for k, (terms, text) in enumerate(zip(sentence_terms, sentence_texts)):
        if nq:
            ev[k] = len(terms & query_terms) / nq
        ev[k] += sum(w for name, w in entity_weights.items() if name and name in text)
    return ev


__all__ = ["pick_bridge_units", "sentence_evidence"]
