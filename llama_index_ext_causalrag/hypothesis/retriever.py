"""HypothesisRetriever: HCQR's three queries (plus the original question) against any retriever,
RRF-fused under a budget."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Union

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from llama_index_ext_causalrag.contract import split_query_engine_options
from llama_index_ext_causalrag.embeddings.query import QueryEmbedder, find_embed_model
from llama_index_ext_causalrag.explain import ExplainMixin, StageRecorder
from llama_index_ext_causalrag.fusion import reciprocal_rank_fusion
from llama_index_ext_causalrag.hypothesis.options import format_options, options_are_polar, span_overlap
from llama_index_ext_causalrag.hypothesis.planner import OfflineHypothesisPlanner
from llama_index_ext_causalrag.hypothesis.presets import DEFAULT_PRESET, HypothesisConfig, get_preset
from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES, ORIGINAL_ROLE, HypothesisQueryBundle
from llama_index_ext_causalrag.hypothesis.transform import HypothesisQueryTransform
from llama_index_ext_causalrag.text.fitting import make_fitter
from llama_index_ext_causalrag.text.pieces import PieceRetrieval, piece_key
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.text.tokens import cut_to_budget, validate_budget
from llama_index_ext_causalrag.validation import check_keywords, check_query, public_method

logger = logging.getLogger(__name__)
_stages = StageRecorder(__name__, "hcqr")


def _span(nws: NodeWithScore) -> Optional[Tuple[str, int, int]]:
    n = nws.node
    s, e = getattr(n, "start_char_idx", None), getattr(n, "end_char_idx", None)
    if n.ref_doc_id is None or s is None or e is None:
        return None
    return n.ref_doc_id, int(s), int(e)


def _preset_transform(
    config: HypothesisConfig, retriever: BaseRetriever, llm: Union[LLM, str, None] = None
) -> HypothesisQueryTransform:
    """The transform a preset implies: ``llm`` (``"settings"``: ``Settings.llm``), else the offline
    planner with the preset's ``option_terms``, scoring options with ``retriever``."""
    return HypothesisQueryTransform(
        llm=llm, retriever=retriever, planner=OfflineHypothesisPlanner(option_terms=config.planning.option_terms)
    )


class HypothesisRetriever(PieceRetrieval, ExplainMixin, BaseRetriever):
    """Hypothesis-conditioned retrieval (HCQR, arXiv 2603.19008).

    The transform plans three queries (support, distinguish, key features); each goes to
    ``retriever``, and so does our addition, the ``original`` list: the question with its
    answer options one per line (the question alone when it has none). The top
    ``per_query_k`` nodes of each list are fused by weighted reciprocal rank (Cormack et al.
    2009) keyed by node id. Duplicates by id and by overlapping character span of the same
    document (overlap >= ``overlap_threshold`` of the shorter span) are removed, then the list
    is cut at ``budget_tokens``: whole nodes while they fit, then the next one cut by ``fit_mode``
    (default: its sentences with the most terms of the question and its options); a budget below
    the best node's size cuts that node instead of dropping it.

    Presets (:data:`HYPOTHESIS_PRESETS`): ``"default"``, tuned on MedMCQA dev with the
    offline planner, runs the four lists with RRF constant 10; when the options carry content
    terms the ``original`` list weighs 2 and the distinguish list 0.5 (every list weighs 1 for
    open questions and yes/no/maybe options, where ``original`` is the bare question or adds
    nothing to rank options by), and the offline planner's key-features query adds the
    options' key terms. ``"paper"`` is the method as published: the three queries, equal
    weights, RRF constant 60, the key-features query from the question alone. Arguments given
    explicitly override the preset.

    Provenance (``causalrag_provenance``): ``method="hcqr"``, ``found_by`` {role: rank},
    ``rrf`` score, final ``rank``, ``planner`` and ``kept_fraction`` when truncated.

    Args:
        retriever: any ``BaseRetriever``.
        transform: a ``HypothesisQueryTransform`` (default: one with no LLM, i.e. the offline
            planner using ``retriever``, with the preset's ``option_terms``). A transform you
            pass keeps its own planner.
        per_query_k: nodes taken from each list (preset: 5, the paper's value).
        budget_tokens: token budget of the fused context (the ``fitting`` stage's); ``None``: the preset's (none).
        use_queries: which lists to run, a subset of ``ALL_ROLES`` (for ablations).
        rrf_k: the RRF constant (preset: 10; ``"paper"``: 60).
        overlap_threshold: span overlap share that makes two nodes duplicates; in (0, 1].
        fit_mode: how the last node that does not fit ``budget_tokens`` is cut: ``"prefix"``
            (its head), ``"sentences"`` (its sentences sharing the most terms with the question
            and its options, as pieces under its id) or ``"window"`` (its one run of sentences
            sharing the most).
        options: default answer options when none come with the query.
        role_weights: RRF weight per role, e.g. ``{"original": 3.0}``; a role given here
            always has this weight; a role left out weighs 1, except ``original`` and
            ``distinguish``, which weigh the preset's ``original_weight`` and
            ``distinguish_weight`` when the options carry content terms.
        embed_model: the model the queries are embedded with, all of a question's queries in
            few batches (``QueryBundle.embedding`` set before each search); default: the one
            embedding model found inside ``retriever`` (none found: each search embeds its own).
        preset: ``"default"``, ``"paper"`` or a :class:`HypothesisConfig`.
    """

    # what as_query_engine hands to the retriever (with_options), the rest going to LlamaIndex
    RETRIEVER_OPTIONS: FrozenSet[str] = frozenset(
        {
            "per_query_k",
            "budget_tokens",
            "use_queries",
            "rrf_k",
            "overlap_threshold",
            "options",
            "role_weights",
            "fit_mode",
        }
    )

    def __init__(
        self,
        retriever: BaseRetriever,
        transform: Optional[HypothesisQueryTransform] = None,
        *,
        per_query_k: Optional[int] = None,
        budget_tokens: Optional[int] = None,
        use_queries: Optional[Sequence[str]] = None,
        rrf_k: Optional[float] = None,
        overlap_threshold: Optional[float] = None,
        fit_mode: Optional[str] = None,
        options: Optional[Mapping[str, str] | Sequence[str]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        role_weights: Optional[Mapping[str, float]] = None,
        preset: "str | HypothesisConfig" = DEFAULT_PRESET,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise ValueError(
                f"retriever must be a llama_index BaseRetriever, got {type(retriever).__name__}; "
                "wrap an index with index.as_retriever()."
            )
        given = {
            "per_query_k": per_query_k,
            "use_queries": use_queries,
            "rrf_k": rrf_k,
            "overlap_threshold": overlap_threshold,
            "fit_mode": fit_mode,
            "budget_tokens": budget_tokens,
        }
        validate_budget(budget_tokens)
        config = get_preset(preset).with_settings(**{k: v for k, v in given.items() if v is not None})
        weights = dict(role_weights or {})
        bad_w = {
            r: w
            for r, w in weights.items()
            if r not in ALL_ROLES or not isinstance(w, (int, float)) or not (0.0 < float(w) < float("inf"))
        }
        if bad_w:
            raise ValueError(
                f"role_weights must map roles of {ALL_ROLES} to positive finite weights, got {bad_w!r}; "
                "a role left out weighs 1."
            )
        self.role_weights = {r: float(w) for r, w in weights.items()}
        self.config = config
        self.planning, self.fusion, self.fitting = config.planning, config.fusion, config.fitting  # one stage each
        for name, value in config.settings().items():  # read-only copies, by name
            setattr(self, name, value)
        self._retriever = retriever
        self._transform = transform or _preset_transform(config, retriever)
        self._options = options
        self._embed_model = embed_model if embed_model is not None else find_embed_model(retriever)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_defaults(
        cls,
        retriever: BaseRetriever,
        llm: Union[LLM, str, None] = None,
        scoring_retriever: Optional[BaseRetriever] = None,
        budget_tokens: Optional[int] = None,
        preset: "str | HypothesisConfig" = DEFAULT_PRESET,
        **kwargs: Any,
    ) -> "HypothesisRetriever":
        """HCQR over ``retriever``: the planner is ``llm`` (``"settings"``: ``Settings.llm``), else
        the logged offline planner (also when ``Settings.llm`` is set for answers), which scores
        ``question + option`` with ``scoring_retriever`` (default ``retriever``; give one whose
        scores compare across queries, e.g. cosine). ``preset`` as in the class; ``kwargs`` go to
        the constructor (``per_query_k``, ``use_queries``, ``role_weights``, ``options``, ...)."""
        config = get_preset(preset)
        transform = _preset_transform(config, scoring_retriever or retriever, llm)
        return cls(retriever, transform=transform, budget_tokens=budget_tokens, preset=config, **kwargs)

    def _settings(self) -> Dict[str, Any]:
        """The constructor's arguments that rebuild this retriever (its settings are in ``preset``)."""
        return {
            "options": self._options,
            "role_weights": self.role_weights,
            "embed_model": self._embed_model,
            "preset": self.config,
            "callback_manager": self.callback_manager,
            "verbose": self._verbose,
        }

    @public_method
    def with_options(self, **retriever_options: Any) -> "HypothesisRetriever":
        """This retriever (same base retriever and planner) with some of :data:`RETRIEVER_OPTIONS`
        changed; a name it does not take is a ``TypeError`` naming it."""
        check_keywords(retriever_options, self.RETRIEVER_OPTIONS)
        if not retriever_options:
            return self
        settings = {**self._settings(), **retriever_options}
        if "budget_tokens" in retriever_options:  # None too: the fitting stage's budget, replaced
            settings["preset"] = self.config.with_settings(budget_tokens=settings.pop("budget_tokens"))
        return type(self)(self._retriever, self._transform, **settings)

    @public_method
    def as_query_engine(self, llm: Optional[LLM] = None, **options: Any) -> RetrieverQueryEngine:
        """A ``RetrieverQueryEngine`` over this retriever, answering with ``llm`` (or ``Settings.llm``;
        the planner keeps the LLM it was built with). Retriever options (``budget_tokens=512``,
        ``per_query_k``, ...) go to :meth:`with_options`, LlamaIndex's query-engine options
        (``streaming``, ``response_mode``, ``text_qa_template``, ``node_postprocessors``, ...) to
        ``RetrieverQueryEngine.from_args``; any other name is a ``TypeError`` naming it. With no
        LLM the engine returns the retrieved nodes only. The generator sees the question, never
        the hypothesis."""
        from llama_index_ext_causalrag.query_engine import retriever_query_engine

        to_retriever, to_engine = split_query_engine_options(options, self.RETRIEVER_OPTIONS)
        return retriever_query_engine(
            self.with_options(**to_retriever), llm=llm, step="HypothesisRetriever", **to_engine
        )

    EXPLAIN_METHOD = "hcqr"

    def _explain_options(self) -> Dict[str, Any]:
        return {
            **self.config.settings(),
            "options": self._options,
            "role_weights": self.role_weights,
            "preset": self.config,
        }

    def _explain_retrieve(self, query: QueryType, options: Any = None) -> List[NodeWithScore]:
        """``retrieve(query)``, or with answer ``options`` :meth:`retrieve_with_plan`'s nodes."""
        if options is None:
            return self.retrieve(query)
        check_query(QueryBundle(query) if isinstance(query, str) else query, "HypothesisRetriever")
        return self.retrieve_with_plan(query, options)[0]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"transform": self._transform}

    # -- planning ------------------------------------------------------------------------
    def _meta(self, query_bundle: QueryBundle, options: Any, embedder: QueryEmbedder) -> Dict[str, Any]:
        meta: Dict[str, Any] = {"retriever": self._retriever, "query_embedder": embedder}
        opts = options if options is not None else self._options
        if opts is not None:
            meta["options"] = opts
        return meta

    def plan(
        self, query: QueryType, options: Any = None, embedder: Optional[QueryEmbedder] = None
    ) -> HypothesisQueryBundle:
        """The transform's bundle for ``query`` (already planned bundles pass through)."""
        qb = QueryBundle(query) if isinstance(query, str) else query
        if isinstance(qb, HypothesisQueryBundle) and qb.queries:
            return qb
        embedder = embedder or QueryEmbedder(self._embed_model)
        return self._transform.run(qb, metadata=self._meta(qb, options, embedder))

    async def aplan(
        self, query: QueryType, options: Any = None, embedder: Optional[QueryEmbedder] = None
    ) -> HypothesisQueryBundle:
        qb = QueryBundle(query) if isinstance(query, str) else query
        if isinstance(qb, HypothesisQueryBundle) and qb.queries:
            return qb
        embedder = embedder or QueryEmbedder(self._embed_model)
        return await self._transform.arun(qb, metadata=self._meta(qb, options, embedder))

    # -- fusion --------------------------------------------------------------------------
    def _fuse(self, bundle: HypothesisQueryBundle, results: Sequence[List[NodeWithScore]]) -> List[NodeWithScore]:
        by_id: Dict[str, NodeWithScore] = {}
        found_by: Dict[str, Dict[str, int]] = {}
        rankings: List[List[str]] = []
        for role, nodes in zip(self.planning.use_queries, results):
            ranking: List[str] = []
            for nws in nodes:
                nid = piece_key(nws)  # pieces of one node (budget-fitted) share its id, not their key
                if nid in found_by and role in found_by[nid]:
                    continue  # a retriever returning the same node twice
                ranking.append(nid)
                by_id.setdefault(nid, nws)
                found_by.setdefault(nid, {})[role] = len(ranking)
                if len(ranking) >= self.fusion.per_query_k:
                    break
            rankings.append(ranking)
        weights = self.weights(bundle)
        fused = reciprocal_rank_fusion(rankings, k=self.fusion.rrf_k, weights=weights)
        _stages.stage(
            "queries",
            {"queries": len(rankings), "found": len(found_by)},
            lambda: self._queries_detail(bundle, rankings, weights),
        )
        kept: List[Tuple[str, float]] = []
        spans: List[Tuple[str, int, int]] = []
        for nid, score in fused.items():
            sp = _span(by_id[nid])
            if sp is not None and any(
                sp[0] == o[0] and span_overlap(sp[1:], o[1:]) >= self.fusion.overlap_threshold for o in spans
            ):
                continue
            if sp is not None:
                spans.append(sp)
            kept.append((nid, score))
        ranked = [NodeWithScore(node=by_id[nid].node, score=score) for nid, score in kept]
        rows = self._fit(bundle, kept, ranked)  # (key, node, kept fraction), pieces of the cut node share its key
        taken = len({key for key, _, _ in rows})
        _stages.stage(
            "hypothesis_fusion",
            {"fused": len(fused), "kept": len(kept), "returned": len(rows)},
            lambda: {
                "took": {
                    "fused": len(fused),
                    "rrf_k": self.fusion.rrf_k,
                    "overlap_threshold": self.fusion.overlap_threshold,
                    "budget_tokens": self.budget_tokens,
                    "fit_mode": self.fitting.fit_mode,
                },
                "decided": {
                    "duplicates_dropped": [n for n in fused if n not in dict(kept)],
                    "ranking": [
                        {
                            "id": nws.node.node_id,
                            "rrf": float(nws.score or 0.0),
                            "found_by": found_by[key],
                            "kept_fraction": f,
                        }
                        for key, nws, f in rows
                    ],
                    "cut_by_budget": [n for n, _ in kept[taken:]],
                },
                "why": "Weighted reciprocal rank fusion of the lists, keyed by node id (and cut, for pieces); overlapping "
                "spans of one document dropped, then the list cut at the budget.",
            },
        )
        out: List[NodeWithScore] = []
        for rank, (key, nws, frac) in enumerate(rows, start=1):
            prov: Dict[str, Any] = {
                "method": "hcqr",
                "stage": "hypothesis_fusion",
                "found_by": found_by[key],
                "rrf": float(nws.score or 0.0),
                "rank": rank,
                "planner": bundle.metadata.get("planner"),
            }
            if frac < 1.0:
                prov["kept_fraction"] = round(frac, 4)
            out.append(annotate(nws, **prov))
        return out

    def _fit(
        self, bundle: HypothesisQueryBundle, kept: List[Tuple[str, float]], ranked: List[NodeWithScore]
    ) -> List[Tuple[str, NodeWithScore, float]]:
        """``ranked`` cut at ``budget_tokens`` (``fit_mode``: the last node's head, or its sentences with
        the most terms of the question and its options), each with its key in ``kept`` and the share
        of its tokens kept."""
        if self.fitting.budget_tokens is None or not ranked:
            return [(key, nws, 1.0) for (key, _), nws in zip(kept, ranked)]
        fit = make_fitter(self.fitting.fit_mode, self.original_query(bundle))
        rows: List[Tuple[str, NodeWithScore, float]] = []
        k = 0
        for nws, frac in cut_to_budget(ranked, self.fitting.budget_tokens, truncate_text=True, fit=fit):
            while ranked[k] is not nws and ranked[k].node.node_id != nws.node.node_id:
                k += 1  # cut_to_budget keeps rank order: whole nodes are the input objects, pieces share an id
            rows.append((kept[k][0], nws, frac))
            if ranked[k] is nws:
                k += 1
        return rows

    def _queries_detail(
        self, bundle: HypothesisQueryBundle, rankings: List[List[str]], weights: List[float]
    ) -> Dict[str, Any]:
        rows = []
        for role, ranking, w in zip(self.planning.use_queries, rankings, weights):
            text = self.original_query(bundle) if role == ORIGINAL_ROLE else bundle.queries.get(role) or ""
            rows.append(
                {"role": role, "query": text if text.strip() else bundle.query_str, "weight": w, "found": ranking}
            )
        return {
            "took": {
                "question": bundle.query_str,
                "hypothesis": bundle.metadata.get("hypothesis"),
                "planner": bundle.metadata.get("planner"),
                "per_query_k": self.fusion.per_query_k,
            },
            "decided": {"queries": rows},
            "why": "The planner's hypothesis-conditioned queries (support, distinguish, key features) and the "
            "question with its options each search the base retriever; each keeps per_query_k nodes.",
        }

    def weights(self, bundle: HypothesisQueryBundle) -> List[float]:
        """The RRF weight of each list of ``use_queries`` for ``bundle``: ``role_weights``, else
        (when the options carry content terms) the preset's ``original_weight`` and
        ``distinguish_weight``, else 1."""
        options = bundle.metadata.get("options") or {}
        content = bool(options) and not options_are_polar(options)
        default = (
            {ORIGINAL_ROLE: self.fusion.original_weight, "distinguish": self.fusion.distinguish_weight}
            if content
            else {}
        )
        return [self.role_weights.get(r, default.get(r, 1.0)) for r in self.planning.use_queries]

    # -- retrieval -----------------------------------------------------------------------
    def _queries(self, bundle: HypothesisQueryBundle, embedder: QueryEmbedder) -> List[QueryBundle]:
        """One bundle per role, embedded in one batch (texts the planner already embedded are
        reused); a blank planned query falls back to the question itself."""
        queries = [
            self.original_query(bundle) if r == ORIGINAL_ROLE else bundle.queries.get(r) or ""
            for r in self.planning.use_queries
        ]
        return embedder.bundles([q if q.strip() else bundle.query_str for q in queries])

    @staticmethod
    def original_query(bundle: HypothesisQueryBundle) -> str:
        """The ``original`` list's query: the question, then its answer options one per line."""
        question = bundle.metadata.get("question") or bundle.query_str
        options = bundle.metadata.get("options") or {}
        return f"{question}\n{format_options(options)}" if options else question

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "HypothesisRetriever")
        return self.retrieve_with_plan(query_bundle)[0]

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "HypothesisRetriever")
        return (await self.aretrieve_with_plan(query_bundle))[0]

    def retrieve_with_plan(
        self, query: QueryType, options: Any = None
    ) -> Tuple[List[NodeWithScore], HypothesisQueryBundle]:
        """Nodes and the plan (hypothesis and queries) for ``query`` with ``options``."""
        embedder = QueryEmbedder(self._embed_model)
        bundle = self.plan(query, options, embedder)
        results = [self._retriever.retrieve(q) for q in self._queries(bundle, embedder)]
        return self._fuse(bundle, results), bundle

    async def aretrieve_with_plan(
        self, query: QueryType, options: Any = None
    ) -> Tuple[List[NodeWithScore], HypothesisQueryBundle]:
        embedder = QueryEmbedder(self._embed_model)
        bundle = await self.aplan(query, options, embedder)
        results = await asyncio.gather(*[self._retriever.aretrieve(q) for q in self._queries(bundle, embedder)])
        return self._fuse(bundle, list(results)), bundle
