"""Entity/relation extractors: an LLM extractor and an offline keyphrase extractor.

Both return one :class:`UnitExtraction` per text unit and are LlamaIndex
``TransformComponent``s: called on nodes, they put ``EntityNode``s and ``Relation``s under
``KG_NODES_KEY`` / ``KG_RELATIONS_KEY`` in the node metadata, like
``SimpleLLMPathExtractor``, so they also feed a ``PropertyGraphIndex``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Union

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.graph_stores.types import KG_NODES_KEY, KG_RELATIONS_KEY, EntityNode, Relation
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

from llama_index_ext_causalrag.causal_graph.keyphrases import keyphrase_candidates, short, split_sentences
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_EXTRACT_PROMPT
from llama_index_ext_causalrag.llm.cache import LLMCache, StageCost
from llama_index_ext_causalrag.llm.io import LLMBudget, LLMRequest, LLMRunner, RetryPolicy, cache_key, fence
from llama_index_ext_causalrag.llm.parse import parse_json_answer

logger = logging.getLogger(__name__)

RETRY_SUFFIX = "\n\nYour previous answer was not valid JSON. Return ONLY the JSON object."


@dataclass
class ExtractedEntity:
    name: str
    type: str = "concept"
    description: str = ""


@dataclass
class ExtractedRelation:
    source: str
    target: str
    description: str = ""
    weight: float = 1.0


@dataclass
class UnitExtraction:
    unit_id: str
    entities: List[ExtractedEntity] = field(default_factory=list)
    relations: List[ExtractedRelation] = field(default_factory=list)
    ok: bool = True


def _progress(items: Sequence[Any], show: bool, desc: str) -> Any:
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


class CausalGraphExtractor(TransformComponent):
    """Base class: ``extract(nodes)`` for the index, ``__call__(nodes)`` for ingestion."""

    relation_label: ClassVar[str] = "RELATED_TO"
    default_min_entity_units: ClassVar[int] = 1

    def extract(
        self,
        nodes: Sequence[BaseNode],
        show_progress: bool = False,
        cost: Optional[StageCost] = None,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
    ) -> List[UnitExtraction]:
        """One extraction per node, in node order. ``budget``/``num_workers`` concern LLM extractors."""
        raise NotImplementedError

    def __call__(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> Sequence[BaseNode]:
        for node, ex in zip(nodes, self.extract(nodes, show_progress=show_progress)):
            existing_nodes = node.metadata.pop(KG_NODES_KEY, [])
            existing_relations = node.metadata.pop(KG_RELATIONS_KEY, [])
            metadata = node.metadata.copy()
            by_name: Dict[str, EntityNode] = {}
            for e in ex.entities:
                by_name.setdefault(
                    e.name,
                    EntityNode(name=e.name, label=e.type, properties={**metadata, "description": e.description}),
                )
            for r in ex.relations:
                for name in (r.source, r.target):
                    by_name.setdefault(name, EntityNode(name=name, properties=dict(metadata)))
                existing_relations.append(
                    Relation(
                        label=self.relation_label,
                        source_id=by_name[r.source].id,
                        target_id=by_name[r.target].id,
                        properties={**metadata, "description": r.description, "weight": r.weight},
                    )
                )
            existing_nodes.extend(by_name.values())
            node.metadata[KG_NODES_KEY] = existing_nodes
            node.metadata[KG_RELATIONS_KEY] = existing_relations
        return nodes


class OfflineEntityExtractor(CausalGraphExtractor):
    """Keyphrase candidates (stopword-delimited runs) and same-sentence co-occurrence relations.

    No model, no download. Relation weight = number of sentences of the unit in which both
    entities occur. Inside ``CausalGraphIndex`` only phrases found in at least
    ``min_entity_units`` units (default 2) are kept, which removes most noise.
    """

    relation_label: ClassVar[str] = "CO_OCCURS_WITH"
    default_min_entity_units: ClassVar[int] = 2

    max_words: int = Field(default=4, ge=1, description="Longest keyphrase, in words.")
    max_entities_per_sentence: int = Field(
        default=12, ge=1, description="Candidates kept per sentence (caps the pairs per sentence)."
    )

    @classmethod
    def class_name(cls) -> str:
        return "OfflineEntityExtractor"

    def extract_text(self, unit_id: str, text: str) -> UnitExtraction:
        from llama_index_ext_causalrag.causal_graph.keyphrases import normalize_name

        entities: Dict[str, ExtractedEntity] = {}
        pair_counts: Counter = Counter()
        for sent in split_sentences(text):
            keys: List[str] = []
            for surface, typ in keyphrase_candidates(sent, self.max_words):
                key = normalize_name(surface)
                if not key or key in keys:
                    continue
                keys.append(key)
                if key not in entities:
                    entities[key] = ExtractedEntity(surface, typ, short(sent))
            keys = keys[: self.max_entities_per_sentence]
            for i, a in enumerate(keys):
                for b in keys[i + 1 :]:
                    pair_counts[(min(a, b), max(a, b))] += 1
        relations = [
            ExtractedRelation(entities[a].name, entities[b].name, "co-occur in a sentence", float(c))
            for (a, b), c in sorted(pair_counts.items())
        ]
        return UnitExtraction(unit_id, list(entities.values()), relations)

    def extract(
        self,
        nodes: Sequence[BaseNode],
        show_progress: bool = False,
        cost: Optional[StageCost] = None,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
    ) -> List[UnitExtraction]:
        return [
            self.extract_text(n.node_id, n.get_content(metadata_mode=MetadataMode.NONE))
            for n in _progress(nodes, show_progress, "Extracting keyphrases")
        ]


def parse_extraction(text: str, unit_id: str) -> UnitExtraction:
    """Validate the extractor's JSON answer; raises ``ValueError`` on a wrong shape.

    An answer cut off by the LLM's token limit keeps its complete entities and relations (a
    retry would be cut at the same place).
    """
    obj, cut = parse_json_answer(text, {"entities"})  # raises, naming the output
    if cut:
        logger.info("extractor: unit %s answer was cut off; kept its complete entities and relations.", unit_id)
    ents_raw, rels_raw = obj.get("entities"), obj.get("relations", [])
    if not isinstance(ents_raw, list) or not isinstance(rels_raw, list):
        raise ValueError(f"extraction JSON needs lists 'entities' and 'relations', got {text[:120]!r}")
    entities: Dict[str, ExtractedEntity] = {}
    for e in ents_raw:
        if isinstance(e, dict) and isinstance(e.get("name"), str) and e["name"].strip():
            name = e["name"].strip()
            entities.setdefault(
                name,
                ExtractedEntity(
                    name, str(e.get("type") or "concept").strip().lower(), str(e.get("description") or "").strip()
                ),
            )
    relations = []
    for r in rels_raw:
        if not isinstance(r, dict):
            continue
        s, t = r.get("source"), r.get("target")
        if not (isinstance(s, str) and isinstance(t, str) and s.strip() and t.strip()) or s.strip() == t.strip():
            continue
        try:
            strength = float(r.get("strength", 5))
        except (TypeError, ValueError):
            strength = 5.0
        for name in (s.strip(), t.strip()):
            entities.setdefault(name, ExtractedEntity(name))
        relations.append(
            ExtractedRelation(
                s.strip(), t.strip(), str(r.get("description") or "").strip(), max(0.1, min(strength, 10.0)) / 10.0
            )
        )
    return UnitExtraction(unit_id, list(entities.values()), relations)


def link_unlinked(ex: UnitExtraction, weight: float) -> UnitExtraction:
    """Link every entity with no relation in its unit to the unit's other entities (co-occurrence).

    Small LLMs list entities and then run out of answer tokens (or interest) before the
    relations; without this, each such entity becomes a one-entity module of its own.
    """
    names = [e.name for e in ex.entities]
    if weight <= 0 or len(names) < 2:
        return ex
    linked = {n for r in ex.relations for n in (r.source, r.target)}
    extra = [
        ExtractedRelation(a, b, "mentioned in the same passage", weight)
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if a not in linked or b not in linked
    ]
    return UnitExtraction(ex.unit_id, ex.entities, ex.relations + extra, ex.ok)


class LLMEntityExtractor(CausalGraphExtractor, PromptMixin):
    """Structured JSON extraction with any LlamaIndex LLM, through the package's LLM layer.

    A malformed answer is retried once with a reminder; a second failure skips the unit
    with a warning (the build goes on). An LLM that keeps raising stops the extraction with
    ``LLMCallError`` after its retries; every answer received is cached (key: model, full
    prompt, generation arguments), so a rerun resumes. ``num_workers`` calls run at once
    (default: 8 for an LLM with real ``acomplete``, else 1).
    """

    llm: LLM
    extract_prompt: PromptTemplate = Field(default=DEFAULT_EXTRACT_PROMPT)
    max_entities: int = Field(default=15, ge=1, description="Entities asked for per unit.")
    cache_dir: Optional[str] = Field(default=None, description="LLM answer cache (default ~/.cache).")
    unlinked_weight: float = Field(
        default=0.1,
        ge=0.0,
        description="An entity the LLM gave no relation in its unit is linked to the unit's other entities "
        "with this weight (the weight of strength 1); 0 leaves it unlinked.",
    )
    num_workers: Optional[int] = Field(default=None, ge=1, description="Concurrent LLM calls (None: automatic).")
    _cache: LLMCache = PrivateAttr()
    _policy: RetryPolicy = PrivateAttr()

    def __init__(
        self,
        llm: LLM,
        extract_prompt: Optional[Union[str, PromptTemplate]] = None,
        max_entities: int = 15,
        cache_dir: Optional[str] = None,
        unlinked_weight: float = 0.1,
        num_workers: Optional[int] = None,
        retry_policy: Optional[RetryPolicy] = None,
    ) -> None:
        if isinstance(extract_prompt, str):
            extract_prompt = PromptTemplate(extract_prompt)
        super().__init__(
            llm=llm,
            extract_prompt=extract_prompt or DEFAULT_EXTRACT_PROMPT,
            max_entities=max_entities,
            cache_dir=None if cache_dir is None else str(cache_dir),
            unlinked_weight=unlinked_weight,
            num_workers=num_workers,
        )
        self._cache = LLMCache(cache_dir)
        self._policy = retry_policy or RetryPolicy()

    @classmethod
    def class_name(cls) -> str:
        return "LLMEntityExtractor"

    def _get_prompts(self) -> PromptDictType:
        return {"extract_prompt": self.extract_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "extract_prompt" in prompts:
            self.extract_prompt = prompts["extract_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def prompt_for(self, text: str) -> str:
        return self.extract_prompt.format(text=fence(text), max_entities=self.max_entities)

    def request(self, node: BaseNode) -> LLMRequest:
        unit_id = node.node_id
        return LLMRequest(
            self.prompt_for(node.get_content(metadata_mode=MetadataMode.LLM)),
            parse=lambda text, _meta: parse_extraction(text, unit_id),
            retry_suffix=RETRY_SUFFIX,
            label=f"unit {unit_id}",
        )

    def is_cached(self, node: BaseNode) -> bool:
        return self._cache.get(cache_key(self.llm, self.request(node).prompt)) is not None

    def extract(
        self,
        nodes: Sequence[BaseNode],
        show_progress: bool = False,
        cost: Optional[StageCost] = None,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
    ) -> List[UnitExtraction]:
        cost = cost if cost is not None else StageCost()
        runner = LLMRunner(
            self.llm,
            stage=cost,
            cache=self._cache,
            policy=self._policy,
            budget=budget,
            num_workers=num_workers or self.num_workers,
            show_progress=show_progress,
            desc="Extracting entities (LLM)",
        )
        out = []
        for node, res in zip(nodes, runner.run([self.request(n) for n in nodes])):
            if res.ok:
                out.append(link_unlinked(res.value, self.unlinked_weight))
                continue
            logger.warning(
                "extractor: unit %s gave malformed output twice (%s); skipping this unit. "
                "Use a stronger LLM or a JSON-mode LLM if this happens often.",
                node.node_id,
                res.error,
            )
            out.append(UnitExtraction(node.node_id, ok=False))
        return out
