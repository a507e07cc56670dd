"""What one query of a :class:`StructureAwareRetriever` knows of the units it touches.

The retriever's stages ask a :class:`QueryFacts` for each unit's cosine to the query, its hub
degree, its section, its neighbour groups, whether it passes the filters, and its node: in memory
(:class:`GraphFacts`) from the whole :class:`StandardsGraph` and the cosine of every unit; served
from the store (``standards/served.py``) for the few units a query reaches, read in batches when
the retriever announces them (:meth:`QueryFacts.prepare`, :meth:`QueryFacts.prepare_nodes`).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.standards.graph import StandardsGraph


class QueryFacts:
    """The units' facts one query reads (the base: nothing to prepare)."""

    def cos(self, u: str) -> float:
        raise NotImplementedError

    def degree(self, u: str) -> float:
        raise NotImplementedError

    def section(self, u: str) -> str:
        raise NotImplementedError

    def neighbours(self, u: str, siblings: bool) -> Dict[str, List[List[str]]]:
        raise NotImplementedError

    def passes(self, u: str) -> bool:
        raise NotImplementedError

    def node(self, u: str) -> BaseNode:
        raise NotImplementedError

    def label(self, u: str) -> str:
        """``u``'s section path for the explanation graph (the id if unknown)."""
        return u

    def prepare(self, pool: Sequence[str], seeds: Sequence[str], siblings: bool) -> None:
        """The expansion will ask for the neighbours of ``seeds`` (``siblings``: with the sibling
        sections) and the facts of their units, the re-rank for the facts of ``pool``."""

    def prepare_nodes(self, ids: Sequence[str]) -> None:
        """The nodes of ``ids`` will be returned."""


class GraphFacts(QueryFacts):
    """Facts from the whole graph in the process: ``cos`` (every unit's cosine, in
    ``graph.unit_ids`` order), ``degree`` (likewise), ``mask`` (None: no filters)."""

    def __init__(self, graph: StandardsGraph, cos: np.ndarray, degree: np.ndarray, mask: Optional[np.ndarray]):
        self.graph, self._cos, self._degree, self._mask = graph, cos, degree, mask

    def cos(self, u: str) -> float:
        return float(self._cos[self.graph.unit_index(u)])

    def degree(self, u: str) -> float:
        return float(self._degree[self.graph.unit_index(u)])

    def section(self, u: str) -> str:
        return self.graph.section_of(u)

    def neighbours(self, u: str, siblings: bool) -> Dict[str, List[List[str]]]:
        return self.graph.unit_neighbours(u, siblings=siblings)

    def passes(self, u: str) -> bool:
        return self._mask is None or bool(self._mask[self.graph.unit_index(u)])

    def node(self, u: str) -> BaseNode:
        return self.graph.node(u)

    def label(self, u: str) -> str:
        if not self.graph.has_node(u):
            return u
        return str(self.graph.node(u).metadata.get("section_path") or u)


__all__ = ["GraphFacts", "QueryFacts"]
