"""The settings of each stage of structure-aware standards retrieval, one default each.

:class:`StructureAwareRetriever` runs six stages, each with its own typed settings:

* :class:`LexicalConfig`: the BM25 prefilter (with the weight of query code identifiers);
* :class:`DenseConfig`: the dense re-rank of the candidates, over embeddings optionally smoothed
  along the section tree and citations;
* :class:`FusionConfig`: reciprocal rank fusion of the two rankings and the pool kept from it;
* :class:`ExpansionConfig`: graph expansion from the top fused units (the seeds);
* :class:`RerankConfig`: the final re-rank (connection + query cosine - hub penalty) and order;
* :class:`FittingConfig`: the returned nodes cut at ``budget_tokens`` (if set).

The presets (:mod:`.presets`) compose them; the components take their defaults from
:data:`LEXICAL`, :data:`DENSE`, :data:`FUSION`, :data:`EXPANSION`, :data:`RERANK` and :data:`FITTING`.
"""

from __future__ import annotations

from typing import Any, Dict, Literal, Optional, Tuple, get_args

from llama_index.core.bridge.pydantic import Field, ValidationInfo, field_validator, model_validator

from llama_index_ext_causalrag.experts.sparse import DEFAULT_B, DEFAULT_K1
from llama_index_ext_causalrag.fusion import DEFAULT_RRF_K
from llama_index_ext_causalrag.presets import Stage
from llama_index_ext_causalrag.text.fitting import FIT_MODE_HELP, FittingStage
from llama_index_ext_causalrag.validation import check_finite, check_finite_values, check_top_k

DEFAULT_EDGE_WEIGHTS: Dict[str, float] = {
    "cites": 1.0,
    "cited_by": 0.6,
    "parent": 0.5,
    "child": 0.5,
    "same_section": 0.7,
    "sibling": 0.0,
}
NeighbourPick = Literal["cosine", "fused"]
NEIGHBOUR_PICKS = get_args(NeighbourPick)
_FINITE = "pass a finite number or leave the default"


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _finite(v: Any, info: ValidationInfo) -> Any:
    return v if v is None else check_finite(v, info.field_name, _FINITE)


class LexicalConfig(Stage):
    """Step 1: BM25 over the units, the top ``prefilter_k`` go on to the dense re-rank."""

    use_bm25: bool = Field(default=True, description="The BM25 prefilter and ranking (False: dense only).")
    prefilter_k: Optional[int] = Field(default=100, description="BM25 candidates re-ranked densely; None = all.")
    bm25_k1: float = Field(default=DEFAULT_K1, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(default=DEFAULT_B, description="BM25 length normalisation.")
    identifier_weight: float = Field(default=2.0, description="BM25 weight of query code identifiers.")

    @field_validator("prefilter_k", mode="before")
    @classmethod
    def _check_count(cls, v: Any, info: ValidationInfo) -> Optional[int]:
        return None if v is None else check_top_k(v, info.field_name)

    @field_validator("bm25_k1", "bm25_b", "identifier_weight", mode="before")
    @classmethod
    def _check_finite(cls, v: Any, info: ValidationInfo) -> Any:
        return _finite(v, info)

    @model_validator(mode="after")
    def _check(self) -> "LexicalConfig":
        _need(self.bm25_k1 >= 0, f"bm25_k1 must be >= 0, got {self.bm25_k1!r}; {DEFAULT_K1} is the usual value.")
        _need(0 <= self.bm25_b <= 1, f"bm25_b must be in [0, 1], got {self.bm25_b!r}; {DEFAULT_B} is the usual value.")
        _need(
            self.identifier_weight >= 1,
            f"identifier_weight must be >= 1, got {self.identifier_weight!r}; use 1 for plain BM25.",
        )
        return self


class DenseConfig(Stage):
    """Step 2: the candidates re-ranked by cosine to the query."""

    use_dense: bool = Field(default=True, description="The dense re-rank (False: BM25 only).")
    smoothing_alpha: Optional[float] = Field(
        default=None, description="Embedding smoothing over the graph (smooth_embeddings' alpha); None = off."
    )

    @field_validator("smoothing_alpha", mode="before")
    @classmethod
    def _check_finite(cls, v: Any, info: ValidationInfo) -> Any:
        return _finite(v, info)

    @model_validator(mode="after")
    def _check(self) -> "DenseConfig":
        _need(
            self.smoothing_alpha is None or 0 <= self.smoothing_alpha <= 1,
            f"smoothing_alpha must be in [0, 1] or None (off), got {self.smoothing_alpha!r}.",
        )
        return self


class FusionConfig(Stage):
    """Step 3: weighted RRF of the BM25 and dense rankings, keyed by node id."""

    rrf_k: float = Field(default=DEFAULT_RRF_K, description="The RRF constant.")
    rrf_weights: Tuple[float, float] = Field(default=(1.0, 0.25), description="RRF weights of (bm25, dense).")
    pool_k: int = Field(default=20, description="Fused units kept beside the expansion.")

    @field_validator("rrf_k", mode="before")
    @classmethod
    def _check_finite(cls, v: Any, info: ValidationInfo) -> Any:
        return _finite(v, info)

    @field_validator("rrf_weights")
    @classmethod
    def _check_rrf(cls, v: Tuple[float, float]) -> Tuple[float, float]:
        check_finite_values({f"rrf_weights[{i}]": w for i, w in enumerate(v)}, "use 0 to switch a ranking off")
        if len(v) != 2 or min(v) < 0:
            raise ValueError(f"rrf_weights must be two non-negative numbers (bm25, dense), got {v!r}.")
        return (float(v[0]), float(v[1]))

    @model_validator(mode="after")
    def _check(self) -> "FusionConfig":
        _need(self.rrf_k > 0, f"rrf_k must be > 0, got {self.rrf_k!r}; {DEFAULT_RRF_K:g} is the usual value.")
        _need(self.pool_k >= 1, f"pool_k must be >= 1, got {self.pool_k!r}.")
        return self


class ExpansionConfig(Stage):
    """Step 4: neighbours of the top ``num_seeds`` fused units through parthood and citations."""

    expand: bool = Field(default=True, description="Graph expansion from the seeds.")
    num_seeds: int = Field(default=1, description="Top fused units expanded through the graph.")
    edge_weights: Dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_EDGE_WEIGHTS),
        description="Weight per relation; a relation left out keeps its default.",
    )
    citation_norm: float = Field(default=1.0, description="A seed's n citations get 1/n**this each.")
    neighbour_pick: NeighbourPick = Field(default="cosine", description="Chunk standing for a cited long section.")

    @field_validator("num_seeds", mode="before")
    @classmethod
    def _check_count(cls, v: Any, info: ValidationInfo) -> int:
        return check_top_k(v, info.field_name)

    @field_validator("citation_norm", mode="before")
    @classmethod
    def _check_finite(cls, v: Any, info: ValidationInfo) -> Any:
        return _finite(v, info)

    @field_validator("edge_weights")
    @classmethod
    def _check_edges(cls, v: Dict[str, float]) -> Dict[str, float]:
        bad = [k for k in v if k not in DEFAULT_EDGE_WEIGHTS]
        if bad:
            raise ValueError(f"unknown edge relation {bad[0]!r} in edge_weights; use {sorted(DEFAULT_EDGE_WEIGHTS)}.")
        check_finite_values({f"edge_weights[{k!r}]": w for k, w in v.items()}, "use 0 to switch a relation off")
        return {**DEFAULT_EDGE_WEIGHTS, **{k: float(w) for k, w in v.items()}}

    @model_validator(mode="after")
    def _check(self) -> "ExpansionConfig":
        _need(
            self.citation_norm >= 0,
            f"citation_norm must be >= 0, got {self.citation_norm!r}; use 0 for no normalisation.",
        )
        return self


class RerankConfig(Stage):
    """Step 5: score = connection strength + ``query_weight`` * cosine - ``beta`` * log(1 + degree)."""

    graph_rerank: bool = Field(default=True, description="Re-rank by strength + cosine - hub penalty.")
    beta: float = Field(default=0.0, description="Hub penalty weight (0 = none).")
    query_weight: float = Field(default=1.0, description="Weight of the query cosine in the re-rank.")
    max_per_section: Optional[int] = Field(default=None, description="Chunks of one section before the rest.")

    @field_validator("max_per_section", mode="before")
    @classmethod
    def _check_count(cls, v: Any, info: ValidationInfo) -> Optional[int]:
        return None if v is None else check_top_k(v, info.field_name)

    @field_validator("beta", "query_weight", mode="before")
    @classmethod
    def _check_finite(cls, v: Any, info: ValidationInfo) -> Any:
        return _finite(v, info)

    @model_validator(mode="after")
    def _check(self) -> "RerankConfig":
        _need(self.beta >= 0, f"beta must be >= 0, got {self.beta!r}; use 0 for no hub penalty.")
        return self


class FittingConfig(FittingStage):
    """Step 6: the returned nodes cut at ``budget_tokens``: whole while they fit, then the next one cut
    by ``fit_mode`` (:class:`~llama_index_ext_causalrag.text.fitting.FittingStage`)."""

    # "sentences": no worse than "prefix" at any budget on the QUIC development questions
    # (CR@128/256/512/1024 42.5/57.3/75.8/88.1 against 32.5/54.8/71.7/88.1; docs/standards.md)
    fit_mode: str = Field(
        default="sentences",
        description=FIT_MODE_HELP + " 'sentences' and 'window' score "
        "sentences by the BM25-idf-weighted terms they share with the query.",
    )


LEXICAL, DENSE, FUSION, EXPANSION, RERANK = (
    LexicalConfig(),
    DenseConfig(),
    FusionConfig(),
    ExpansionConfig(),
    RerankConfig(),
)
FITTING = FittingConfig()

__all__ = [
    "DEFAULT_EDGE_WEIGHTS",
    "DENSE",
    "DenseConfig",
    "EXPANSION",
    "ExpansionConfig",
    "FITTING",
    "FUSION",
    "FittingConfig",
    "FusionConfig",
    "LEXICAL",
    "LexicalConfig",
    "NEIGHBOUR_PICKS",
    "RERANK",
    "RerankConfig",
]
