"""``CausalGraphIndex``: the offline half of CausalRAG2 (entity graph, Leiden hierarchy,
module summaries, causal gates), with cost accounting, JSON/NumPy persistence and
incremental updates (``update.py``). Where it lives, in memory or on LlamaIndex's stores, is
one backend object (``backend.py``) the index calls."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document, MetadataMode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.storage.storage_context import StorageContext
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.causal_graph import build, build_stages
from llama_index_ext_causalrag.causal_graph.backend import MemoryBackend, StoresBackend, backend_for_build
from llama_index_ext_causalrag.causal_graph.build_stages import NameVectors, RecordingJudge, split_units
from llama_index_ext_causalrag.causal_graph.export import GraphExportMixin
from llama_index_ext_causalrag.causal_graph.extract import (
    CausalGraphExtractor,
    LLMEntityExtractor,
    OfflineEntityExtractor,
)
from llama_index_ext_causalrag.causal_graph.gates import LLMGateJudge, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph
from llama_index_ext_causalrag.causal_graph.handle import StateHandle, StateReads, StateView
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy
from llama_index_ext_causalrag.causal_graph.presets import (
    DEFAULT_MODULE_EMBEDDING,
    MODULE_EMBEDDINGS,
    CausalGraphBuildConfig,
)
from llama_index_ext_causalrag.causal_graph.querying import CausalGraphQueryMixin
from llama_index_ext_causalrag.causal_graph.state import CausalGraphState, UpdateData
from llama_index_ext_causalrag.causal_graph.summaries import ExtractiveSummarizer, LLMSummarizer
from llama_index_ext_causalrag.causal_graph.update import CausalGraphUpdates, component_params, update_components
from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.llm.cache import DEFAULT_CACHE_DIR, CostTracker, StageCost
from llama_index_ext_causalrag.llm.io import LLMBudget, LLMBudgetExceeded, LLMCallError, RetryPolicy
from llama_index_ext_causalrag.llm.resolve import model_name_of, resolve_llm
from llama_index_ext_causalrag.storage.index_backend import IndexBackend
from llama_index_ext_causalrag.text.tokens import count_tokens
from llama_index_ext_causalrag.validation import check_documents, check_no_vector_store, public_method

logger = logging.getLogger(__name__)

OWNER = "CausalGraphIndex"
OFFLINE_ALTERNATIVE = "keyphrase extractor, extractive summaries and cue-sentence gate judge"
# the keywords of from_documents / from_nodes besides the build options (fields of CausalGraphBuildConfig)
COLLABORATORS = (
    "storage_context",
    "show_progress",
    "embed_model",
    "llm",
    "extractor",
    "summarizer",
    "gate_judge",
    "kvstore",
    "namespace",
    "cache_dir",
    "retry_policy",
    "build_config",
)
member_embeddings = build_stages.member_embeddings
# what estimate() assumes before any extraction is cached
ENTITIES_PER_UNIT, COMPLETION_TOKENS_PER_UNIT = 8.0, 250

__all__ = [
    "CausalGraphBuildConfig",
    "CausalGraphIndex",
    "DEFAULT_MODULE_EMBEDDING",
    "MODULE_EMBEDDINGS",
    "member_embeddings",
    "split_units",
]


class CausalGraphIndex(StateReads, CausalGraphUpdates, CausalGraphQueryMixin, GraphExportMixin):
    """Entity graph + Leiden hierarchy H0..HL + module summaries + causal gates over text units.

    Build with :meth:`from_documents` (or :meth:`from_nodes`); without an LLM every step
    has an offline alternative. ``build_stats`` holds per-stage seconds, LLM calls and tokens,
    and gate statistics per level. Persist with :meth:`persist`, load with :meth:`from_persist_dir`,
    or build into LlamaIndex stores (``storage_context=``, ``kvstore=``) and reopen with
    :meth:`from_vector_store`; update with ``insert``, ``insert_nodes``, ``delete_ref_doc``,
    ``refresh_ref_docs``; export with :meth:`to_graphml` and :meth:`graph_page` (``export.py``).
    """

    def __init__(
        self,
        graph: CausalGraph,
        units: Sequence[BaseNode],
        entity_embeddings: np.ndarray,
        module_embeddings: np.ndarray,
        params: Dict[str, Any],
        build_stats: Dict[str, Any],
        embed_model: Optional[BaseEmbedding] = None,
        update_data: Optional[UpdateData] = None,
        backend: Optional[IndexBackend] = None,
    ) -> None:
        state = CausalGraphState(graph, units, entity_embeddings, module_embeddings, build_stats, update_data)
        self._embed_model = embed_model
        self._components: Dict[str, Any] = {}  # what updates use: extractor, summarizer, gate_judge, llm, ...
        self.state_handle = StateHandle(
            state, params, backend if backend is not None else MemoryBackend(), lambda: self.embed_model, self._reopened
        )

    # what the index serves lives in its handle; retrievers get the handle, never the index
    _state = property(lambda self: self.state_handle.state, lambda self, st: setattr(self.state_handle, "state", st))
    params = property(lambda self: self.state_handle.params, lambda self, p: setattr(self.state_handle, "params", p))
    _backend = property(lambda self: self.state_handle.backend)
    _update_lock = property(lambda self: self.state_handle.lock)

    def snapshot(self) -> StateView:
        """The current state, as a retriever reads it; updates replace the state, never change it."""
        return self.state_handle.view()

    def store_generation(self) -> Optional[str]:
        """The kvstore generation this index object's state is (None: no kvstore to follow)."""
        return self.state_handle.generation()

    def _reopened(self, backend: IndexBackend) -> Tuple[CausalGraphState, Dict[str, Any], IndexBackend]:
        """The stores' latest state, parameters and backend (another index object wrote them)."""
        kv = backend.kv  # type: ignore[attr-defined]
        fresh = StoresBackend.open(
            type(self),
            vector_store=backend.vector_store,  # type: ignore[attr-defined]
            docstore=backend.docstore,
            persist_dir=None,  # type: ignore[attr-defined]
            embed_model=self._embed_model,
            kvstore=kv.kvstore,
            namespace=kv.namespace,
        )
        return fresh._state, fresh.params, fresh._backend

    @property
    def embed_model(self) -> BaseEmbedding:
        """Resolved lazily: loading an index does not load the embedding model."""
        if self._embed_model is None:
            self._embed_model = resolve_embed_model(None)
        return self._embed_model

    @property
    def build_config(self) -> CausalGraphBuildConfig:
        """The build settings recorded in ``params`` (of an older index: the defaults where absent)."""
        return CausalGraphBuildConfig.from_params(self.params)

    # ------------------------------------------------------------------ build
    @classmethod
    @public_method
    def from_documents(
        cls,
        documents: Sequence[Document],
        *,
        storage_context: Optional[StorageContext] = None,
        show_progress: bool = False,
        embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None,
        extractor: Optional[CausalGraphExtractor] = None,
        summarizer: Optional[object] = None,
        gate_judge: Optional[object] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        cache_dir: Optional[str] = None,
        retry_policy: Optional[RetryPolicy] = None,
        build_config: Optional[CausalGraphBuildConfig] = None,
        **build_options: Any,
    ) -> "CausalGraphIndex":
        """Split ``documents`` into units (``SentenceSplitter(chunk_size, chunk_overlap)`` of the
        build config), then build (:meth:`from_nodes`, which explains the other arguments).

        ``build_config`` (a :class:`CausalGraphBuildConfig`) and ``build_options`` (any of its
        fields by name, e.g. ``max_cluster_size=3``, over ``build_config``) set the build; a name
        that is neither an argument nor a field is a ``TypeError`` naming it.
        """
        check_no_vector_store(build_options)
        config = CausalGraphBuildConfig.from_options(build_config, build_options, also=COLLABORATORS)
        documents = check_documents(documents, invisible="skip")
        if not documents:
            raise ValueError(
                f"{OWNER}.from_documents got an empty corpus (0 documents); pass at least one Document with text."
            )
        units = split_units(documents, config.units.chunk_size, config.units.chunk_overlap)
        return cls.from_nodes(
            units,
            storage_context=storage_context,
            show_progress=show_progress,
            embed_model=embed_model,
            llm=llm,
            extractor=extractor,
            summarizer=summarizer,
            gate_judge=gate_judge,
            kvstore=kvstore,
            namespace=namespace,
            cache_dir=cache_dir,
            retry_policy=retry_policy,
            build_config=config,
        )

    @classmethod
    @public_method
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        *,
        storage_context: Optional[StorageContext] = None,
        show_progress: bool = False,
        embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None,
        extractor: Optional[CausalGraphExtractor] = None,
        summarizer: Optional[object] = None,
        gate_judge: Optional[object] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        cache_dir: Optional[str] = None,
        retry_policy: Optional[RetryPolicy] = None,
        build_config: Optional[CausalGraphBuildConfig] = None,
        **build_options: Any,
    ) -> "CausalGraphIndex":
        """Build from text units (nodes with ``ref_doc_id`` and char spans).

        ``build_config`` / ``build_options``: as in :meth:`from_documents`; among them
        ``num_workers``, concurrent LLM calls per stage (default 8 for an LLM with real
        ``acomplete``, else 1; the graph does not depend on it), and ``max_llm_calls`` /
        ``max_llm_tokens``, caps on what this build may spend: it stops before exceeding a cap with
        :class:`~llama_index_ext_causalrag.llm.io.LLMBudgetExceeded`, every answer received is
        cached, and rerunning the same build resumes. ``module_embedding``: ``"members"``
        (default) gives a module the normalised mean of its entities' vectors, with no model
        call; ``"summary"`` embeds each module's title and summary. ``retry_policy`` (backoff,
        per-call timeout) goes to the default LLM steps, whose answers are cached in ``cache_dir``.

        With ``storage_context`` (``StorageContext.from_defaults(vector_store=..., docstore=...)``)
        the units go to its docstore and, with their embeddings, to its vector store; with
        ``kvstore`` (a ``BaseKVStore``; collection ``namespace``, by default the vector store's
        table name) the graph, entity and module vectors, update data and parameters go there
        (docs/stores.md). The stores are checked before anything is embedded.
        """
        check_no_vector_store(build_options)
        cfg = CausalGraphBuildConfig.from_options(build_config, build_options, also=COLLABORATORS)
        backend, embed_model = backend_for_build(storage_context, embed_model, kvstore, namespace)
        units = [n for n in nodes if n.get_content(metadata_mode=MetadataMode.NONE).strip()]
        if not units:
            raise ValueError(
                f"{OWNER} got an empty corpus ({len(list(nodes))} nodes, none with text); "
                "pass at least one node with text."
            )
        needs_llm = extractor is None or gate_judge is None or summarizer is None
        llm = resolve_llm(llm, f"{OWNER} build", OFFLINE_ALTERNATIVE) if needs_llm else llm
        rp = {"cache_dir": cache_dir, "retry_policy": retry_policy}
        extractor = extractor or (LLMEntityExtractor(llm, **rp) if llm else OfflineEntityExtractor())
        summarizer = summarizer or (LLMSummarizer(llm, **rp) if llm else ExtractiveSummarizer())
        gate_judge = gate_judge or (LLMGateJudge(llm, **rp) if llm else OfflineGateJudge())
        embed_model = resolve_embed_model(embed_model)
        cost = CostTracker()
        try:
            index = cls._build(
                units,
                llm=llm,
                embed_model=embed_model,
                extractor=extractor,
                summarizer=summarizer,
                gate_judge=gate_judge,
                show_progress=show_progress,
                config=cfg,
                cost=cost,
                backend=backend,
            )
            index._components = {
                "llm": llm,
                "extractor": extractor,
                "summarizer": summarizer,
                "gate_judge": gate_judge,
                "num_workers": cfg.run.num_workers,
            }
        except (LLMBudgetExceeded, LLMCallError) as e:
            raise cls._stopped(
                e, units, llm=llm, extractor=extractor, config=cfg, cost=cost, cache_dir=cache_dir
            ) from e
        backend.write(index.params, index._state, embed_model=index.embed_model, show_progress=show_progress)
        return index

    @classmethod
    def _stopped(
        cls,
        e: Exception,
        units: List[BaseNode],
        *,
        llm: Optional[LLM],
        extractor: Any,
        config: CausalGraphBuildConfig,
        cost: CostTracker,
        cache_dir: Optional[str],
    ) -> Exception:
        """The error a build stopped by ``e`` (its LLM budget or a failed call) raises."""
        where = cache_dir or getattr(getattr(extractor, "_cache", None), "cache_dir", None) or DEFAULT_CACHE_DIR
        stage = next((k for k, st in reversed(list(cost.stages.items()))), "?")
        made = cost.total_calls
        if isinstance(e, LLMBudgetExceeded):
            try:
                left = cls._estimate_units(
                    units,
                    llm=llm,
                    extractor=extractor,
                    config=config,
                    entities_per_unit=ENTITIES_PER_UNIT,
                    completion_tokens_per_unit=COMPLETION_TOKENS_PER_UNIT,
                    cache_dir=cache_dir,
                )["total_calls"]
            except Exception:  # noqa: BLE001 - the estimate is only advice here
                left = "?"
            return LLMBudgetExceeded(
                f"{OWNER} build stopped before exceeding its LLM budget ({e}) in stage {stage!r}: "
                f"{made} LLM call(s) made, about {left} remaining (estimate()). Every answer received is "
                f"cached in {str(where)!r}; to resume, rerun the same build with a higher max_llm_calls / "
                "max_llm_tokens (or none): cached answers cost no call.",
                e.calls,
                e.tokens,
            )
        return LLMCallError(
            f"{OWNER} build stopped in stage {stage!r}: {e}. The {made} answer(s) received were "
            f"cached in {str(where)!r}; rerun the same build to resume (cached answers cost no call)."
        )

    @classmethod
    def _build(
        cls,
        units: List[BaseNode],
        *,
        llm: Optional[LLM],
        embed_model: BaseEmbedding,
        extractor: Any,
        summarizer: Any,
        gate_judge: Any,
        show_progress: bool,
        config: CausalGraphBuildConfig,
        cost: CostTracker,
        backend: IndexBackend,
    ) -> "CausalGraphIndex":
        entities = config.resolved_entities(extractor.default_min_entity_units)
        config = config.model_copy(update={"entities": entities})  # what params.json records
        budget = LLMBudget(config.run.max_llm_calls, config.run.max_llm_tokens)
        num_workers = config.run.num_workers

        def embed(texts: List[str]) -> np.ndarray:
            return np.asarray(
                embed_model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32
            )

        with cost.timed("extract") as st:
            extractions = extractor.extract(
                units, show_progress=show_progress, cost=st, budget=budget, num_workers=num_workers
            )
        names = NameVectors(embed)
        entity_graph = build_stages.entity_graph(units, extractions, names, entities=entities, cost=cost)
        graph, ent_emb = entity_graph.graph, entity_graph.entity_embeddings
        messages: List[str] = []
        if not graph.entities:
            messages.append(
                f"no entities were extracted from {len(units)} units (min_entity_units="
                f"{entities.min_entity_units}); the index has no graph. Lower min_entity_units or check "
                "the extractor."
            )
        with cost.timed("hierarchy"):
            modules, msgs = leiden_hierarchy(
                graph.entity_ids(),
                [(r.source, r.target, r.weight) for r in graph.relations],
                **config.hierarchy.model_dump(),
            )
            messages += msgs if graph.entities else []
            graph.modules = {m.id: m for m in modules}
        for m in messages:
            logger.warning("CausalGraphIndex: %s", m)
        with cost.timed("summaries") as st:
            build_stages.summarise(
                entity_graph,
                list(graph.modules.values()),
                summarizer=summarizer,
                cost=st,
                show_progress=show_progress,
                budget=budget,
                num_workers=num_workers,
            )
        small = sum(len(m.members) < getattr(summarizer, "min_members", 0) for m in graph.modules.values())
        if small:
            messages.append(
                f"{small} module(s) smaller than min_members={summarizer.min_members} were "
                "summarised from their entities' descriptions, without an LLM call."
            )
            logger.info("CausalGraphIndex: %s", messages[-1])
        with cost.timed("embed_summaries"):
            mod_emb = build_stages.embed_modules(
                graph,
                graph.module_ids(),
                embed,
                dim=ent_emb.shape[1] if ent_emb.size else 0,
                mode=config.modules.module_embedding,
                entity_embeddings=ent_emb,
            )
        judge = RecordingJudge(gate_judge)
        with cost.timed("gates") as st:
            graph.gates, gate_stats = build_stages.causal_gates(
                entity_graph,
                mod_emb,
                judge,
                candidates_per_module=config.modules.gate_candidates_per_module,
                cost=st,
                show_progress=show_progress,
                budget=budget,
                num_workers=num_workers,
            )
        graph.sort()
        params = {
            **config.persisted(),
            "extractor": extractor.class_name(),
            "summarizer": getattr(summarizer, "name", type(summarizer).__name__),
            "gate_judge": getattr(gate_judge, "name", type(gate_judge).__name__),
            "components": component_params(extractor, summarizer, gate_judge),
            "llm": model_name_of(llm) if llm is not None else None,
            "embed_model": model_name_of(embed_model),
            # whether any unit has a metadata "title": without, a retriever reads no unit for title links
            "titled": any(unit.metadata.get("title") for unit in units),
        }
        stats = build_stages.build_stats(units, entity_graph, cost, gate_stats, messages)
        data = UpdateData({x.unit_id: x for x in extractions}, names.vectors, judge.record)
        return cls(graph, units, ent_emb, mod_emb, params, stats, embed_model, data, backend=backend)

    # --------------------------------------------------------------- estimate
    @classmethod
    @public_method
    def estimate(
        cls,
        documents: Sequence[Document],
        *,
        llm: Optional[LLM] = None,
        extractor: Optional[CausalGraphExtractor] = None,
        entities_per_unit: float = ENTITIES_PER_UNIT,
        completion_tokens_per_unit: int = COMPLETION_TOKENS_PER_UNIT,
        cache_dir: Optional[str] = None,
        build_config: Optional[CausalGraphBuildConfig] = None,
        **build_options: Any,
    ) -> Dict[str, Any]:
        """Expected LLM calls and tokens of a build (``build_config`` / ``build_options`` as in
        :meth:`from_documents`), before anything is spent.

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
        cfg = CausalGraphBuildConfig.from_options(
            build_config,
            build_options,
            also=("llm", "extractor", "entities_per_unit", "completion_tokens_per_unit", "cache_dir", "build_config"),
        )
        units = split_units(list(documents), cfg.units.chunk_size, cfg.units.chunk_overlap)
        return cls._estimate_units(
            units,
            llm=llm,
            extractor=extractor,
            config=cfg,
            entities_per_unit=entities_per_unit,
            completion_tokens_per_unit=completion_tokens_per_unit,
            cache_dir=cache_dir,
        )

    @classmethod
    def _estimate_units(
        cls,
        units: Sequence[BaseNode],
        *,
        llm: Optional[LLM],
        extractor: Optional[Any],
        config: CausalGraphBuildConfig,
        entities_per_unit: float,
        completion_tokens_per_unit: int,
        cache_dir: Optional[str],
    ) -> Dict[str, Any]:
        if extractor is None and llm is not None:
            extractor = LLMEntityExtractor(llm, cache_dir=cache_dir)
        # a text that occurs twice (a duplicated article) is extracted once: the second is a cache hit
        distinct = list({u.get_content(metadata_mode=MetadataMode.LLM): u for u in units}.values())
        n_ent = entities_per_unit * len(distinct)
        out: Dict[str, Any] = {
            "units": len(units),
            "distinct_units": len(distinct),
            "basis": f"entities_per_unit={entities_per_unit:g}",
        }
        if not isinstance(extractor, LLMEntityExtractor):
            out["extract"] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        else:
            todo = [u for u in distinct if not extractor.is_cached(u)]
            if units and not todo:  # all extractions paid for: count their entities (no LLM call)
                keys = build.collect_keys(extractor.extract(units, cost=StageCost()))
                n_ent = len(build.select_keys(keys, extractor.default_min_entity_units, None))
                out["basis"] = f"cached extractions ({n_ent} distinct entity names)"
            out["extract"] = {
                "calls": len(todo),
                "cached_units": len(distinct) - len(todo),
                "prompt_tokens": sum(
                    count_tokens(extractor.prompt_for(u.get_content(metadata_mode=MetadataMode.LLM))) for u in todo
                ),
                "completion_tokens": completion_tokens_per_unit * len(todo),
            }
        if llm is None:
            out["summaries"] = out["gates"] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        else:
            leaves = n_ent / max(1.0, config.hierarchy.max_cluster_size / 2.0)
            modules = int(round(leaves * 1.25))
            judged = int(round(modules * config.modules.gate_candidates_per_module * 0.7))
            out["summaries"] = {"calls": modules, "prompt_tokens": modules * 600, "completion_tokens": modules * 90}
            out["gates"] = {"calls": judged, "prompt_tokens": judged * 250, "completion_tokens": judged * 25}
        for k in ("calls", "prompt_tokens", "completion_tokens"):
            out["total_" + k] = sum(out[s][k] for s in ("extract", "summaries", "gates"))
        return out

    # ------------------------------------------------------------ persistence
    def persist(self, persist_dir: str | Path) -> None:
        """graph.json, docstore.json, params.json, stats.json, entity/module (and, once computed,
        unit) embeddings .npy, what updates reuse (update.json, name_embeddings.npy and, for an
        LLM extractor, extractions.json) and manifest.json, swapped in atomically (no pickle). Built
        in stores: all but the units and their vectors (the stores hold them; reopen with
        :meth:`from_vector_store`)."""
        self._backend.persist(self.params, self._state, persist_dir)

    @classmethod
    @public_method
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        *,
        embed_model: Optional[BaseEmbedding] = None,
        llm: Optional[LLM] = None,
        extractor: Optional[CausalGraphExtractor] = None,
        summarizer: Optional[object] = None,
        gate_judge: Optional[object] = None,
        cache_dir: Optional[str] = None,
    ) -> "CausalGraphIndex":
        """Load without re-embedding; an ``embed_model`` given is checked against the stored
        dimension (none given: resolved lazily, on first use). ``llm``, ``extractor``,
        ``summarizer`` and ``gate_judge`` are what later updates use (default: the kinds the
        index was built with, the LLM ones on ``llm`` or ``Settings.llm`` with the answer cache
        ``cache_dir``)."""
        index = MemoryBackend.open(cls, persist_dir, embed_model)
        index._components = update_components(llm, extractor, summarizer, gate_judge, cache_dir)
        return index

    @classmethod
    @public_method
    def from_vector_store(
        cls,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: Optional[str | Path] = None,
        *,
        embed_model: Optional[BaseEmbedding] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        llm: Optional[LLM] = None,
        extractor: Optional[CausalGraphExtractor] = None,
        summarizer: Optional[object] = None,
        gate_judge: Optional[object] = None,
        cache_dir: Optional[str] = None,
    ) -> "CausalGraphIndex":
        """Reopen an index built with ``storage_context=``, without embedding anything: the graph,
        entity and module vectors, unit ids and term postings and update data from the ``kvstore``
        it was built with (collection ``namespace``) or from ``persist_dir`` (written by
        ``index.persist``); the units' text and vectors stay in ``docstore`` and ``vector_store``,
        read per query (``causal_graph/units.py``). ``embed_model`` only embeds queries (and
        the units of later updates); ``llm`` ... ``cache_dir`` as in :meth:`from_persist_dir`."""
        index = StoresBackend.open(
            cls,
            vector_store=vector_store,
            docstore=docstore,
            persist_dir=persist_dir,
            embed_model=embed_model,
            kvstore=kvstore,
            namespace=namespace,
        )
        index._components = update_components(llm, extractor, summarizer, gate_judge, cache_dir)
        return index
