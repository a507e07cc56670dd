"""The hypothesis state and the query bundle that carries HCQR's three queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from llama_index.core.schema import QueryBundle

# the paper's three queries q1, q2, q3, in this order.
QUERY_ROLES = ("support", "distinguish", "key_features")
# Our addition: the question as asked, with its answer options when it has any (LlamaIndex's
# QueryFusionRetriever keeps the original query beside its rewrites in the same way).
ORIGINAL_ROLE = "original"
ALL_ROLES = (*QUERY_ROLES, ORIGINAL_ROLE)


@dataclass
class HypothesisState:
    """Working answer ``y0``, discriminating features ``f``, confirming evidence ``e``,
    rationale ``r``. ``planner`` is ``"llm"`` or ``"offline"``."""

    working_answer: str
    discriminating_features: List[str] = field(default_factory=list)
    confirming_evidence: List[str] = field(default_factory=list)
    rationale: str = ""
    planner: str = "llm"
    working_option: str | None = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "working_answer": self.working_answer,
            "working_option": self.working_option,
            "discriminating_features": list(self.discriminating_features),
            "confirming_evidence": list(self.confirming_evidence),
            "rationale": self.rationale,
            "planner": self.planner,
        }


@dataclass
class HypothesisQueryBundle(QueryBundle):
    """A ``QueryBundle`` with HCQR's three queries.

    ``query_str`` stays the user's question (a response synthesizer downstream sees the
    question, never the hypothesis); ``custom_embedding_strs`` are the three queries, so an
    embedding retriever behind a ``TransformRetriever`` searches with their mean.
    ``metadata`` holds ``hypothesis`` (a :meth:`HypothesisState.to_dict`), ``options``,
    ``question`` (the stem without inline options) and ``planner``; none of it enters node text.
    """

    queries: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)

    @property
    def hypothesis(self) -> Dict[str, Any]:
        return dict(self.metadata.get("hypothesis", {}))
