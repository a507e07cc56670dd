"""``CausalGraphIndex``: the offline half of CausalRAG2 (entity graph, Leiden hierarchy,
module summaries, causal gates), with cost accounting and JSON/NumPy persistence."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document, MetadataMode
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_ext_causalrag.causal_graph import build
from llama_index_ext_causalrag.causal_graph.facade import CausalGraphQueryMixin
from llama_index_ext_causalrag.causal_graph.extract import (
    CausalGraphExtractor,
    LLMEntityExtractor,
    OfflineEntityExtractor,
)
from llama_index_ext_causalrag.causal_graph.gates import GateContext, LLMGateJudge, OfflineGateJudge, build_gates
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy, validate_hierarchy_params
from llama_index_ext_causalrag.causal_graph.summaries import (
    ExtractiveSummarizer,
    LLMSummarizer,
    SummaryContext,
    summarize_all,
)
from llama_index_ext_causalrag.defaults import model_name_of, resolve_embed_model, resolve_llm
from llama_index_ext_causalrag.llm_cache import DEFAULT_CACHE_DIR, CostTracker, StageCost
from llama_index_ext_causalrag.llm_io import LLMBudget, LLMBudgetExceeded, LLMCallError, RetryPolicy
from llama_index_ext_causalrag.persistence import (
    array_dim,
    check_embedder,
    open_persisted,
    persist_to,
    stable_model_name,
)
from llama_index_ext_causalrag.tokens import count_tokens
from llama_index_ext_causalrag.validation import check_documents

logger = logging.getLogger(__name__)

OFFLINE_ALTERNATIVE = "keyphrase extractor, extractive summaries and cue-sentence gate judge"
# How a module gets its vector: "members", the normalised mean of its entities' name vectors (no
# model call); "summary", the embedded "title. summary" text (one text per module).
MODULE_EMBEDDINGS = ("members", "summary")
DEFAULT_MODULE_EMBEDDING = "members"


def member_embeddings(graph: CausalGraph, module_ids: Sequence[str], entity_ids: Sequence[str],
                      entity_embeddings: np.ndarray) -> np.ndarray:
    """(n_modules, d): each module's normalised mean of its member entities' unit rows."""
    row = {e: i for i, e in enumerate(entity_ids)}
    dim = entity_embeddings.shape[1] if entity_embeddings.ndim == 2 else 0
    out = np.zeros((len(module_ids), dim), dtype=np.float32)
    if not dim:
        return out
    E = entity_embeddings / np.maximum(np.linalg.norm(entity_embeddings, axis=1, keepdims=True), 1e-12)
    for k, mid in enumerate(module_ids):
        rows = [row[e] for e in graph.modules[mid].members if e in row]
        if rows:
            v = E[rows].mean(axis=0)
            out[k] = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


def split_units(documents: Sequence[Document], chunk_size: int, chunk_overlap: int) -> List[BaseNode]:
    """``SentenceSplitter`` units with stable ids ``<doc_id>::<i>`` (a rebuild gives the same graph)."""
    return SentenceSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, id_func=lambda i, doc: f"{doc.doc_id}::{i}"
    ).get_nodes_from_documents(documents)


class CausalGraphIndex(CausalGraphQueryMixin):
    """Entity graph + Leiden hierarchy H0..HL + module summaries + causal gates over text units.

    Build with :meth:`from_documents` (or :meth:`from_nodes`); without an LLM every step
    has an offline alternative. ``build_stats`` holds per-stage seconds, LLM calls and tokens,
    and gate statistics per level. Persist with :meth:`persist`, load with :meth:`from_persist_dir`.
    """

    def __init__(self, graph: CausalGraph, units: Sequence[BaseNode], entity_embeddings: np.ndarray,
                 module_embeddings: np.ndarray, params: Dict[str, Any], build_stats: Dict[str, Any],
                 embed_model: Optional[BaseEmbedding] = None) -> None:
        self.graph = graph
        self.units = list(units)
        self.unit_by_id = {u.node_id: u for u in self.units}
        self.entity_ids = graph.entity_ids()
        self.module_ids = graph.module_ids()
        if entity_embeddings.shape[0] != len(self.entity_ids) or module_embeddings.shape[0] != len(self.module_ids):
            raise ValueError(
                f"embedding rows ({entity_embeddings.shape[0]} entities, {module_embeddings.shape[0]} modules) "
                f"do not match the graph ({len(self.entity_ids)}, {len(self.module_ids)}); rebuild the index.")
        self.entity_embeddings = entity_embeddings
        self.module_embeddings = module_embeddings
        self.params = params
        self.build_stats = build_stats
        self._embed_model = embed_model

    @property
    def embed_model(self) -> BaseEmbedding:
        """Resolved lazily: loading an index does not load the embedding model."""
        if self._embed_model is None:
            self._embed_model = resolve_embed_model(None)
        return self._embed_model

    # ------------------------------------------------------------------ build
    @classmethod
    def from_documents(cls, documents: Sequence[Document], llm: Optional[LLM] = None,
                       embed_model: Optional[BaseEmbedding] = None, extractor: Optional[CausalGraphExtractor] = None,
                       gate_judge: Optional[object] = None, show_progress: bool = True, chunk_size: int = 256,
                       chunk_overlap: int = 0, **kwargs: Any) -> "CausalGraphIndex":
        """Split ``documents`` into units (``SentenceSplitter(chunk_size, chunk_overlap)``), then build."""
        documents = check_documents(documents, "CausalGraphIndex.from_documents")
        if not documents:
            raise ValueError("CausalGraphIndex.from_documents got an empty corpus (0 documents); "
                             "pass at least one Document with text.")
        units = split_units(documents, chunk_size, chunk_overlap)
        return cls.from_nodes(units, llm=llm, embed_model=embed_model, extractor=extractor, gate_judge=gate_judge,
                              show_progress=show_progress, _extra_params={"chunk_size": chunk_size,
                                                                      "chunk_overlap": chunk_overlap}, **kwargs)

    @classmethod
    def from_nodes(cls, nodes: Sequence[BaseNode], llm: Optional[LLM] = None,
                   embed_model: Optional[BaseEmbedding] = None, extractor: Optional[CausalGraphExtractor] = None,
                   gate_judge: Optional[object] = None, summarizer: Optional[object] = None,
                   show_progress: bool = True, max_cluster_size: int = 10, max_levels: int = 4,
                   resolution: float = 1.0, seed: int = 42, gate_candidates_per_module: int = 5,
                   min_entity_units: Optional[int] = None, max_entities: Optional[int] = 8000,
                   string_threshold: float = 0.92, embed_threshold: float = 0.95,
                   cache_dir: Optional[str] = None, num_workers: Optional[int] = None,
                   max_llm_calls: Optional[int] = None, max_llm_tokens: Optional[int] = None,
                   retry_policy: Optional[RetryPolicy] = None, module_embedding: str = DEFAULT_MODULE_EMBEDDING,
                   _extra_params: Optional[Dict[str, Any]] = None) -> "CausalGraphIndex":
        """Build from text units (nodes with ``ref_doc_id`` and char spans).

        ``num_workers``: concurrent LLM calls per stage (default 8 for an LLM with real
        ``acomplete``, else 1); the graph does not depend on it. ``max_llm_calls`` /
        ``max_llm_tokens`` cap what this build may spend: it stops before exceeding a cap with
        :class:`~llama_index_ext_causalrag.llm_io.LLMBudgetExceeded`, every answer received is
        cached, and rerunning the same build resumes. ``retry_policy`` (backoff, per-call timeout)
        goes to the default LLM steps. ``module_embedding``: ``"members"`` (default) gives a module
        the normalised mean of its entities' vectors, with no model call; ``"summary"`` embeds each
        module's title and summary.
        """
        validate_hierarchy_params(max_cluster_size, max_levels, resolution)
        if module_embedding not in MODULE_EMBEDDINGS:
            raise ValueError(f"module_embedding must be one of {MODULE_EMBEDDINGS}, got {module_embedding!r}.")
        if not isinstance(gate_candidates_per_module, int) or gate_candidates_per_module < 0:
            raise ValueError(f"gate_candidates_per_module must be an int >= 0, got {gate_candidates_per_module!r}; "
                             "use 0 to build no gates.")
        units = [n for n in nodes if n.get_content(metadata_mode=MetadataMode.NONE).strip()]
        if not units:
            raise ValueError(f"CausalGraphIndex got an empty corpus ({len(list(nodes))} nodes, none with text); "
                             "pass at least one node with text.")
        needs_llm = extractor is None or gate_judge is None or summarizer is None
        llm = resolve_llm(llm, "CausalGraphIndex build", OFFLINE_ALTERNATIVE) if needs_llm else llm
        rp = {"cache_dir": cache_dir, "retry_policy": retry_policy}
        extractor = extractor or (LLMEntityExtractor(llm, **rp) if llm else OfflineEntityExtractor())
        summarizer = summarizer or (LLMSummarizer(llm, **rp) if llm else ExtractiveSummarizer())
        gate_judge = gate_judge or (LLMGateJudge(llm, **rp) if llm else OfflineGateJudge())
        embed_model = resolve_embed_model(embed_model)
        min_units = min_entity_units if min_entity_units is not None else extractor.default_min_entity_units
        cost = CostTracker()
        budget = LLMBudget(max_llm_calls, max_llm_tokens)
        try:
            return cls._build(units, llm, embed_model, extractor, summarizer, gate_judge, show_progress,
                              max_cluster_size, max_levels, resolution, seed, gate_candidates_per_module,
                              min_units, max_entities, string_threshold, embed_threshold, cost, budget,
                              num_workers, {**(_extra_params or {}), "module_embedding": module_embedding})
        except (LLMBudgetExceeded, LLMCallError) as e:
            where = cache_dir or getattr(getattr(extractor, "_cache", None), "cache_dir", None) or DEFAULT_CACHE_DIR
            stage = next((k for k, st in reversed(list(cost.stages.items()))), "?")
            made = cost.total_calls
            if isinstance(e, LLMBudgetExceeded):
                try:
                    left = cls._estimate_units(units, llm, extractor, max_cluster_size, gate_candidates_per_module,
                                               cache_dir=cache_dir)["total_calls"]
                except Exception:  # noqa: BLE001 - the estimate is only advice here
                    left = "?"
                raise LLMBudgetExceeded(
                    f"CausalGraphIndex build stopped before exceeding its LLM budget ({e}) in stage {stage!r}: "
                    f"{made} LLM call(s) made, about {left} remaining (estimate()). Every answer received is "
                    f"cached in {str(where)!r}; to resume, rerun the same build with a higher max_llm_calls / "
                    "max_llm_tokens (or none): cached answers cost no call.", e.calls, e.tokens) from e
            raise LLMCallError(
                f"CausalGraphIndex build stopped in stage {stage!r}: {e}. The {made} answer(s) received were "
                f"cached in {str(where)!r}; rerun the same build to resume (cached answers cost no call).") from e

    @classmethod
    def _build(cls, units: List[BaseNode], llm: Optional[LLM], embed_model: BaseEmbedding, extractor: Any,
               summarizer: Any, gate_judge: Any, show_progress: bool, max_cluster_size: int, max_levels: int,
               resolution: float, seed: int, gate_candidates_per_module: int, min_units: int,
               max_entities: Optional[int], string_threshold: float, embed_threshold: float, cost: CostTracker,
               budget: LLMBudget, num_workers: Optional[int],
               _extra_params: Optional[Dict[str, Any]]) -> "CausalGraphIndex":

        def embed(texts: List[str]) -> np.ndarray:
            return np.asarray(embed_model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)

        with cost.timed("extract") as st:
            extractions = extractor.extract(units, show_progress=show_progress, cost=st, budget=budget,
                                            num_workers=num_workers)
        with cost.timed("canonicalise") as st:
            keys = build.collect_keys(extractions)
            kept = build.select_keys(keys, min_units, max_entities)
        with cost.timed("embed_entities"):
            entities, key_to_id, ent_emb = build.merge_entities(keys, kept, embed, string_threshold, embed_threshold)
        graph = CausalGraph(entities=entities)
        messages: List[str] = []
        if not entities:
            messages.append(f"no entities were extracted from {len(units)} units (min_entity_units={min_units}); "
                            "the index has no graph. Lower min_entity_units or check the extractor.")
        with cost.timed("relations"):
            rels = build.merge_relations(extractions, key_to_id)
            mi = build.mention_index([(u.node_id, u.get_content(metadata_mode=MetadataMode.NONE)) for u in units],
                                     key_to_id)
            build.count_cues(rels, mi)
            graph.relations = list(rels.values())
        with cost.timed("hierarchy"):
            modules, msgs = leiden_hierarchy(graph.entity_ids(), [(r.source, r.target, r.weight) for r in graph.relations],
                                             max_cluster_size, max_levels, resolution, seed)
            messages += msgs if entities else []
            graph.modules = {m.id: m for m in modules}
            internal: Dict[int, Dict[str, float]] = {}
            for lvl in range(graph.num_levels):
                mof = {e: m.id for m in graph.modules_at(lvl) for e in m.members}
                deg: Dict[str, float] = {}
                for r in graph.relations:
                    if r.source in mof and mof.get(r.source) == mof.get(r.target):
                        deg[r.source] = deg.get(r.source, 0.0) + r.weight
                        deg[r.target] = deg.get(r.target, 0.0) + r.weight
                internal[lvl] = deg
        for m in messages:
            logger.warning("CausalGraphIndex: %s", m)
        with cost.timed("summaries") as st:
            sctx = SummaryContext(graph, mi.sentences, mi.sentence_entities, mi.entity_sentences, internal)
            summarize_all(list(graph.modules.values()), summarizer, sctx, st, show_progress, budget=budget,
                          num_workers=num_workers)
        small = sum(len(m.members) < getattr(summarizer, "min_members", 0) for m in graph.modules.values())
        if small:
            messages.append(f"{small} module(s) smaller than min_members={summarizer.min_members} were "
                            "summarised from their entities' descriptions, without an LLM call.")
            logger.info("CausalGraphIndex: %s", messages[-1])
        with cost.timed("embed_summaries"):
            mids = graph.module_ids()
            if (_extra_params or {}).get("module_embedding") == "summary" and mids:
                mod_emb = embed([f"{graph.modules[m].title}. {graph.modules[m].summary}" for m in mids])
                mod_emb /= np.maximum(np.linalg.norm(mod_emb, axis=1, keepdims=True), 1e-12)
            else:
                mod_emb = member_embeddings(graph, mids, graph.entity_ids(), ent_emb)
        with cost.timed("gates") as st:
            gctx = GateContext(graph, mi.sentences, mi.sentence_unit, mi.sentence_entities, mi.entity_sentences, mi.cue)
            graph.gates, gate_stats = build_gates(graph, dict(zip(mids, mod_emb)), gate_judge, gctx, st,
                                                  gate_candidates_per_module, show_progress, budget=budget,
                                                  num_workers=num_workers)
        graph.sort()
        possible = sum(s["possible_pairs"] for s in gate_stats.values())
        judged = sum(s["judged"] for s in gate_stats.values())
        params = {
            **(_extra_params or {}), "max_cluster_size": max_cluster_size, "max_levels": max_levels,
            "resolution": resolution, "seed": seed, "gate_candidates_per_module": gate_candidates_per_module,
            "min_entity_units": min_units, "max_entities": max_entities, "string_threshold": string_threshold,
            "embed_threshold": embed_threshold, "extractor": extractor.class_name(),
            "summarizer": getattr(summarizer, "name", type(summarizer).__name__),
            "gate_judge": getattr(gate_judge, "name", type(gate_judge).__name__),
            "llm": model_name_of(llm) if llm is not None else None, "embed_model": model_name_of(embed_model),
        }
        stats = {
            "units": len(units), "sentences": len(mi.sentences), "cue_sentences": int(mi.cue.sum()),
            "graph": graph.summary_stats(), "cost": cost.to_dict(), "llm_calls": cost.total_calls,
            "gates": {"per_level": gate_stats, "possible_pairs": possible, "judged": judged,
                      "gates": len(graph.gates), "judged_share": (judged / possible) if possible else 0.0},
            "messages": messages,
        }
        return cls(graph, units, ent_emb, mod_emb, params, stats, embed_model)

    # --------------------------------------------------------------- estimate
    @classmethod
    def estimate(cls, documents: Sequence[Document], llm: Optional[LLM] = None,
                 extractor: Optional[CausalGraphExtractor] = None, chunk_size: int = 256, chunk_overlap: int = 0,
                 max_cluster_size: int = 10, gate_candidates_per_module: int = 5, entities_per_unit: float = 8.0,
                 completion_tokens_per_unit: int = 250, cache_dir: Optional[str] = None) -> Dict[str, Any]:
        """Expected LLM calls and tokens of a build, before anything is spent.

        Extraction is exact (one call per distinct unit text not yet in the cache, prompt tokens
        counted);
        summaries and gate judgements are predicted from the number of entities and the
        hierarchy/gate parameters. The number of entities is ``entities_per_unit`` x units
        (typical LLM extraction yield after merging) before anything is spent, and the real
        count of distinct entity names once every unit's extraction is in the cache
        (``basis`` says which). Summaries and judgements are predicted whether or not they are
        already cached (their prompts depend on the hierarchy, which needs a build), so for a
        build whose answers are all cached this overstates what remains. With no LLM all
        counts are 0.
        """
        return cls._estimate_units(split_units(list(documents), chunk_size, chunk_overlap), llm, extractor,
                                   max_cluster_size, gate_candidates_per_module, entities_per_unit,
                                   completion_tokens_per_unit, cache_dir)

    @classmethod
    def _estimate_units(cls, units: Sequence[BaseNode], llm: Optional[LLM], extractor: Optional[Any],
                        max_cluster_size: int = 10, gate_candidates_per_module: int = 5,
                        entities_per_unit: float = 8.0, completion_tokens_per_unit: int = 250,
                        cache_dir: Optional[str] = None) -> Dict[str, Any]:
        if extractor is None and llm is not None:
            extractor = LLMEntityExtractor(llm, cache_dir=cache_dir)
        # a text that occurs twice (a duplicated article) is extracted once: the second is a cache hit
        distinct = list({u.get_content(metadata_mode=MetadataMode.LLM): u for u in units}.values())
        n_ent = entities_per_unit * len(distinct)
        out: Dict[str, Any] = {"units": len(units), "distinct_units": len(distinct),
                               "basis": f"entities_per_unit={entities_per_unit:g}"}
        if not isinstance(extractor, LLMEntityExtractor):
            out["extract"] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        else:
            todo = [u for u in distinct if not extractor.is_cached(u)]
            if units and not todo:  # all extractions paid for: count their entities (no LLM call)
                keys = build.collect_keys(extractor.extract(units, cost=StageCost()))
                n_ent = len(build.select_keys(keys, extractor.default_min_entity_units, None))
                out["basis"] = f"cached extractions ({n_ent} distinct entity names)"
            out["extract"] = {
                "calls": len(todo), "cached_units": len(distinct) - len(todo),
                "prompt_tokens": sum(count_tokens(extractor.prompt_for(u.get_content(metadata_mode=MetadataMode.LLM)))
                                     for u in todo),
                "completion_tokens": completion_tokens_per_unit * len(todo)}
        if llm is None:
            out["summaries"] = out["gates"] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        else:
            leaves = n_ent / max(1.0, max_cluster_size / 2.0)
            modules = int(round(leaves * 1.25))
            judged = int(round(modules * gate_candidates_per_module * 0.7))
            out["summaries"] = {"calls": modules, "prompt_tokens": modules * 600, "completion_tokens": modules * 90}
            out["gates"] = {"calls": judged, "prompt_tokens": judged * 250, "completion_tokens": judged * 25}
        for k in ("calls", "prompt_tokens", "completion_tokens"):
            out["total_" + k] = sum(out[s][k] for s in ("extract", "summaries", "gates"))
        return out

    # ------------------------------------------------------------ persistence
    def persist(self, persist_dir: str | Path) -> None:
        """graph.json, docstore.json, params.json, stats.json, entity/module (and, once computed,
        unit) embeddings .npy and manifest.json, swapped in atomically (no pickle)."""
        dim = array_dim(self.entity_embeddings) or array_dim(self.module_embeddings)
        params = dict(self.params)
        for key in ("llm", "embed_model"):  # no machine paths in the folder
            if isinstance(params.get(key), str):
                params[key] = stable_model_name(params[key])
        with persist_to(persist_dir, "CausalGraphIndex") as w:
            w.write_json("graph.json", self.graph.to_dict(), ensure_ascii=False, sort_keys=True)
            ds = SimpleDocumentStore()
            ds.add_documents(self.units, allow_update=True)
            ds.persist(str(w.dir / "docstore.json"))
            w.write_json("stats.json", self.build_stats, indent=1, sort_keys=True)
            w.save_array("entity_embeddings.npy", self.entity_embeddings)
            w.save_array("module_embeddings.npy", self.module_embeddings)
            if self._unit_embeddings is not None:  # computed by as_retriever: saved, never recomputed
                w.save_array("unit_embeddings.npy", self._unit_embeddings)
            w.rows.update(units=len(self.units), entities=len(self.entity_ids), modules=len(self.module_ids))
            w.params.update(params=params, unit_ids=[u.node_id for u in self.units],
                            embed_model=params.get("embed_model"), embed_dim=dim)

    @classmethod
    def from_persist_dir(cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None) -> "CausalGraphIndex":
        """Load without re-embedding; an ``embed_model`` given is checked against the stored
        dimension (none given: resolved lazily, on first use)."""
        ix = open_persisted(persist_dir, "CausalGraphIndex", "index.persist(persist_dir)")
        meta = ix.params
        if embed_model is not None:
            check_embedder(meta, embed_model, ix.dir, "CausalGraphIndex")
        graph = CausalGraph.from_dict(ix.json("graph.json"))
        ds = SimpleDocumentStore.from_persist_path(str(ix.path("docstore.json")))
        units = [ds.get_node(i) for i in meta["unit_ids"]]
        ix.check_rows("units", len(units))
        index = cls(graph, units, ix.array("entity_embeddings.npy"), ix.array("module_embeddings.npy"),
                    meta["params"], ix.json("stats.json"), embed_model)
        if ix.has("unit_embeddings.npy"):
            index.set_unit_embeddings(ix.array("unit_embeddings.npy"))
        return index
