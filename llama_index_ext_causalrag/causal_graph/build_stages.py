"""The stages of a ``CausalGraphIndex`` build after extraction, shared by builds and updates.

An update runs the same code as a build on the whole corpus, with what it may reuse handed
in: name embeddings (:class:`NameVectors`), judged gate pairs (:class:`RecordingJudge`),
module summaries and embeddings. So the graph an update derives from its extractions is the
graph a build derives from the same extractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document, MetadataMode

from llama_index_ext_causalrag.causal_graph import build
from llama_index_ext_causalrag.causal_graph.extract import UnitExtraction
from llama_index_ext_causalrag.causal_graph.gates import GateContext, Judgement, build_gates
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Gate, Module
from llama_index_ext_causalrag.causal_graph.stages import DEFAULT_MODULE_EMBEDDING, EntitiesConfig
from llama_index_ext_causalrag.causal_graph.summaries import SummaryContext, summarize_all
from llama_index_ext_causalrag.llm.cache import CostTracker, StageCost
from llama_index_ext_causalrag.llm.io import LLMBudget

Pair = Tuple[str, str]


def split_units(documents: Sequence[Document], chunk_size: int, chunk_overlap: int) -> List[BaseNode]:
    """``SentenceSplitter`` units with stable ids ``<doc_id>::<i>`` (a rebuild gives the same graph)."""
    return SentenceSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, id_func=lambda i, doc: f"{doc.doc_id}::{i}"
    ).get_nodes_from_documents(documents)


def unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12) if x.size else x


class NameVectors:
    """Unit-norm embeddings of entity names, each name embedded once (and kept for updates)."""

    def __init__(self, embed: Callable[[List[str]], np.ndarray], known: Optional[Dict[str, np.ndarray]] = None) -> None:
        self._embed = embed
        self.vectors: Dict[str, np.ndarray] = dict(known or {})
        self.embedded = 0
        self.used: Set[str] = set()

    def __call__(self, names: List[str]) -> np.ndarray:
        self.used.update(names)
        todo = list(dict.fromkeys(n for n in names if n not in self.vectors))
        if todo:
            self.vectors.update(zip(todo, unit_rows(self._embed(todo))))
            self.embedded += len(todo)
        return np.stack([self.vectors[n] for n in names]) if names else np.zeros((0, 0), np.float32)


class RecordingJudge:
    """A gate judge that reuses ``known`` judgements of pairs and records every judgement.

    Pairs in ``known`` cost nothing; the rest go to ``judge`` (its ``judge_many`` when it has one).
    """

    def __init__(self, judge: Any, known: Optional[Dict[Pair, Judgement]] = None) -> None:
        self.judge = judge
        self.name = getattr(judge, "name", type(judge).__name__)
        self.known = dict(known or {})
        self.record: Dict[Pair, Judgement] = {}
        self.judged = 0

    def judge_many(
        self,
        pairs: Sequence[Tuple[Module, Module, float]],
        ctx: Any,
        cost: StageCost,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
        show_progress: bool = False,
        desc: str = "",
    ) -> List[Judgement]:
        todo = [p for p in pairs if (p[0].id, p[1].id) not in self.known]
        if hasattr(self.judge, "judge_many"):
            fresh = self.judge.judge_many(
                todo,
                ctx,
                cost,
                budget=budget,
                num_workers=num_workers,
                show_progress=show_progress and bool(todo),
                desc=desc,
            )
        else:
            fresh = [self.judge.judge(a, b, cos, ctx, cost) for a, b, cos in todo]
        self.judged += len(todo)
        got = dict(zip(((a.id, b.id) for a, b, _ in todo), fresh))
        out = [got[(a.id, b.id)] if (a.id, b.id) in got else self.known[(a.id, b.id)] for a, b, _ in pairs]
        self.record.update(((a.id, b.id), j) for (a, b, _), j in zip(pairs, out))
        return out


@dataclass
class EntityGraph:
    """Entities and relations of a corpus, its mention index and the entity embeddings."""

    graph: CausalGraph
    entity_embeddings: np.ndarray
    key_to_id: Dict[str, str]
    mentions: build.MentionIndex


def entity_graph(
    units: Sequence[BaseNode],
    extractions: Sequence[UnitExtraction],
    names: NameVectors,
    *,
    entities: EntitiesConfig,
    cost: CostTracker,
    held: Optional[Set[str]] = None,
) -> EntityGraph:
    """Canonical entities, relations with cue counts and mentions (stages canonicalise,
    embed_entities, relations), by the ``entities`` stage (``min_entity_units`` resolved).
    ``held``: the keys of the index an update starts from."""
    if entities.min_entity_units is None:
        raise ValueError("entity_graph needs min_entity_units resolved (CausalGraphBuildConfig.resolved_entities).")
    with cost.timed("canonicalise"):
        keys = build.collect_keys(extractions)
        kept = build.select_keys(keys, entities.min_entity_units, entities.max_entities, held)
    with cost.timed("embed_entities"):
        found, key_to_id, ent_emb = build.merge_entities(
            keys, kept, names, string_threshold=entities.string_threshold, embed_threshold=entities.embed_threshold
        )
    graph = CausalGraph(entities=found)
    with cost.timed("relations"):
        rels = build.merge_relations(extractions, key_to_id)
        mi = build.mention_index(
            [(u.node_id, u.get_content(metadata_mode=MetadataMode.NONE)) for u in units], key_to_id
        )
        build.count_cues(rels, mi)
        graph.relations = list(rels.values())
    return EntityGraph(graph, ent_emb, key_to_id, mi)


def internal_degrees(graph: CausalGraph) -> Dict[int, Dict[str, float]]:
    """level -> entity -> summed weight of its relations inside its module of that level."""
    internal: Dict[int, Dict[str, float]] = {}
    for lvl in range(graph.num_levels):
        mof = {e: m.id for m in graph.modules_at(lvl) for e in m.members}
        deg: Dict[str, float] = {}
        for r in graph.relations:
            if r.source in mof and mof.get(r.source) == mof.get(r.target):
                deg[r.source] = deg.get(r.source, 0.0) + r.weight
                deg[r.target] = deg.get(r.target, 0.0) + r.weight
        internal[lvl] = deg
    return internal


def summarise(
    entity_graph: EntityGraph,
    modules: Sequence[Module],
    *,
    summarizer: Any,
    cost: StageCost,
    show_progress: bool,
    budget: Optional[LLMBudget],
    num_workers: Optional[int],
) -> None:
    """Title and summary of ``modules`` (in place), finest level first."""
    mi = entity_graph.mentions
    ctx = SummaryContext(
        entity_graph.graph,
        mi.sentences,
        mi.sentence_entities,
        mi.entity_sentences,
        internal_degrees(entity_graph.graph),
    )
    summarize_all(list(modules), summarizer, ctx, cost, show_progress, budget=budget, num_workers=num_workers)


def member_embeddings(
    graph: CausalGraph, module_ids: Sequence[str], entity_ids: Sequence[str], entity_embeddings: np.ndarray
) -> np.ndarray:
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


def embed_modules(
    graph: CausalGraph,
    module_ids: Sequence[str],
    embed: Callable[[List[str]], np.ndarray],
    *,
    dim: int,
    mode: str = DEFAULT_MODULE_EMBEDDING,
    entity_embeddings: Optional[np.ndarray] = None,
) -> np.ndarray:
    """(len(module_ids), dim) module vectors: ``"members"``, the normalised mean of the member
    entities' rows of ``entity_embeddings`` (rows in ``graph.entity_ids()`` order); ``"summary"``,
    unit rows of the embedded "title. summary"."""
    if not module_ids:
        return np.zeros((0, dim), dtype=np.float32)
    if mode == "members" and entity_embeddings is not None:
        return member_embeddings(graph, module_ids, graph.entity_ids(), entity_embeddings)
    return unit_rows(embed([f"{graph.modules[m].title}. {graph.modules[m].summary}" for m in module_ids]))


def causal_gates(
    entity_graph: EntityGraph,
    module_embeddings: np.ndarray,
    judge: RecordingJudge,
    *,
    candidates_per_module: int,
    cost: StageCost,
    show_progress: bool,
    budget: Optional[LLMBudget],
    num_workers: Optional[int],
) -> Tuple[List[Gate], Dict[str, Dict[str, int]]]:
    """Gates of every level (``module_embeddings`` rows in ``graph.module_ids()`` order), judging
    ``candidates_per_module`` pairs per module (the ``modules`` stage's ``gate_candidates_per_module``)."""
    g, mi = entity_graph.graph, entity_graph.mentions
    ctx = GateContext(g, mi.sentences, mi.sentence_unit, mi.sentence_entities, mi.entity_sentences, mi.cue)
    return build_gates(
        g,
        dict(zip(g.module_ids(), module_embeddings)),
        judge,
        ctx,
        cost,
        gate_candidates_per_module=candidates_per_module,
        show_progress=show_progress,
        budget=budget,
        num_workers=num_workers,
    )


def build_stats(
    units: Sequence[BaseNode],
    entity_graph: EntityGraph,
    cost: CostTracker,
    gate_stats: Dict[str, Dict[str, int]],
    messages: List[str],
) -> Dict[str, Any]:
    """``build_stats`` of an index: sizes, per-stage cost, gate statistics, messages."""
    possible = sum(s["possible_pairs"] for s in gate_stats.values())
    judged = sum(s["judged"] for s in gate_stats.values())
    return {
        "units": len(units),
        "sentences": len(entity_graph.mentions.sentences),
        "cue_sentences": int(entity_graph.mentions.cue.sum()),
        "graph": entity_graph.graph.summary_stats(),
        "cost": cost.to_dict(),
        "llm_calls": cost.total_calls,
        "gates": {
            "per_level": gate_stats,
            "possible_pairs": possible,
            "judged": judged,
            "gates": len(entity_graph.graph.gates),
            "judged_share": (judged / possible) if possible else 0.0,
        },
        "messages": messages,
    }
