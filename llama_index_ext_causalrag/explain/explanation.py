"""``Explanation``: what one query returned and how each stage got there, as a dict or a page."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, QueryType

from llama_index_ext_causalrag.explain.trace import recording


def json_safe(value: Any) -> Any:
    """``value`` with only JSON types: tuples and sets as lists, NumPy scalars as numbers, keys as
    strings, NaN and infinities as None, any other object as its ``repr`` (round-trips through
    ``json.dumps``/``json.loads`` unchanged)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [json_safe(v) for v in items]
    item = getattr(value, "item", None)  # NumPy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return json_safe(item())
    tolist = getattr(value, "tolist", None)  # NumPy arrays
    if callable(tolist):
        return json_safe(tolist())
    model_dump = getattr(value, "model_dump", None)  # pydantic configs
    if callable(model_dump):
        return json_safe(model_dump())
    return repr(value)


def node_dict(nws: NodeWithScore) -> Dict[str, Any]:
    """``{"id", "text", "score", "metadata"}`` of a returned node, provenance included."""
    return {
        "id": nws.node.node_id,
        "text": nws.node.get_content(metadata_mode=MetadataMode.NONE),
        "score": json_safe(None if nws.score is None else float(nws.score)),
        "metadata": json_safe(dict(nws.node.metadata)),
    }


class Explanation:
    """One query: the returned ``nodes`` (exactly what ``retrieve`` returns), the ``stages`` that
    produced them (``{"name", "took", "decided", "why"}`` each) and, for CausalRAG2, the ``graph``
    searched. :meth:`to_dict` is the page's input; :meth:`to_html` writes the page."""

    def __init__(
        self,
        method: str,
        query: str,
        options: Mapping[str, Any],
        nodes: Sequence[NodeWithScore],
        stages: Sequence[Dict[str, Any]],
        graph: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.method = method
        self.query = query
        self.options = dict(options)
        self.nodes: List[NodeWithScore] = list(nodes)
        self.stages = list(stages)
        self.graph = graph

    def stage(self, name: str) -> Dict[str, Any]:
        """The first recorded stage called ``name``; a ``KeyError`` lists the recorded names."""
        for s in self.stages:
            if s["name"] == name:
                return s
        raise KeyError(f"no stage {name!r} in this explanation; it has {[s['name'] for s in self.stages]}.")

    def to_dict(self) -> Dict[str, Any]:
        """JSON-safe dict: ``method``, ``query``, ``options``, ``nodes``, ``stages``, ``graph``."""
        return {
            "method": self.method,
            "query": self.query,
            "options": json_safe(self.options),
            "nodes": [node_dict(n) for n in self.nodes],
            "stages": json_safe(self.stages),
            "graph": json_safe(self.graph),
        }

    def to_html(self, path: str | Path) -> Path:
        """Write the page of :meth:`to_dict` to ``path`` (UTF-8) and return the path."""
        from llama_index_ext_causalrag.explain.html import render_page

        out = Path(path)
        out.write_text(render_page(self.to_dict()), encoding="utf-8")
        return out

    def __repr__(self) -> str:
        return (
            f"Explanation(method={self.method!r}, query={self.query!r}, nodes={len(self.nodes)}, "
            f"stages={[s['name'] for s in self.stages]})"
        )


class ExplainMixin:
    """``explain(query)`` for a retriever: ``retrieve`` run with its stages recorded.

    A retriever sets :attr:`EXPLAIN_METHOD` (or overrides :meth:`_explain_method`) and
    :meth:`_explain_options` (the settings it retrieves with, shown beside the result).
    """

    EXPLAIN_METHOD: str = ""

    def _explain_method(self) -> str:
        return self.EXPLAIN_METHOD

    def _explain_options(self) -> Dict[str, Any]:
        return {}

    def _explain_retrieve(self, query: QueryType, **kwargs: Any) -> List[NodeWithScore]:
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}.explain() takes no options besides the query, got {sorted(kwargs)}."
            )
        return self.retrieve(query)  # type: ignore[attr-defined]

    def explain(self, query: QueryType, **kwargs: Any) -> Explanation:
        """What ``retrieve(query)`` returns, with the stages that produced it (same errors too)."""
        method = self._explain_method()
        with recording(method) as trace:
            nodes = self._explain_retrieve(query, **kwargs)
        query_str = query.query_str if isinstance(query, QueryBundle) else str(query)
        options = {**self._explain_options(), **kwargs}
        return Explanation(method, query_str, json_safe(options), nodes, trace.stages, trace.graph)
