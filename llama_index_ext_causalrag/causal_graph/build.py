"""Build steps of ``CausalGraphIndex`` between extraction and hierarchy: merge, mention index.

Kept apart from ``index.py`` so each stays short. Turns per-unit extractions into canonical
entities and relations, and maps every corpus sentence to the entities it mentions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from llama_index_ext_causalrag.causal_graph.canonical import canonical_groups
from llama_index_ext_causalrag.causal_graph.extract import UnitExtraction
from llama_index_ext_causalrag.causal_graph.graph import Entity, Relation
from llama_index_ext_causalrag.causal_graph.keyphrases import (
    find_mentions,
    has_causal_cue,
    normalize_name,
    split_sentences,
)


@dataclass
class KeyStats:
    surfaces: Counter = field(default_factory=Counter)
    types: Counter = field(default_factory=Counter)
    description: str = ""
    units: Set[str] = field(default_factory=set)


def collect_keys(extractions: Sequence[UnitExtraction]) -> Dict[str, KeyStats]:
    keys: Dict[str, KeyStats] = defaultdict(KeyStats)
    for ex in extractions:
        for e in ex.entities:
            k = normalize_name(e.name)
            if not k:
                continue
            st = keys[k]
            st.surfaces[e.name] += 1
            st.types[e.type] += 1
            st.units.add(ex.unit_id)
            if not st.description and e.description:
                st.description = e.description
    return dict(keys)


def select_keys(
    keys: Dict[str, KeyStats], min_entity_units: int, max_entities: Optional[int], held: Optional[Set[str]] = None
) -> List[str]:
    """Keys found in at least ``min_entity_units`` units, the ``max_entities`` most frequent.

    ``held``: the keys an index holds (an update). They win ties and are kept while found in
    ``min_entity_units`` units, so a new key joins by being found in more units than the
    least frequent kept key, and no entity leaves while it has mentions; an updated index may
    hold more than ``max_entities`` keys (a rebuild applies the cap exactly).
    """
    held = held or set()
    eligible = [k for k, st in keys.items() if len(st.units) >= min_entity_units]
    eligible.sort(key=lambda k: (-len(keys[k].units), k not in held, k))
    kept = set(eligible if max_entities is None else eligible[:max_entities])
    return sorted(kept | {k for k in eligible if k in held})


def _surface(st: KeyStats) -> str:
    return sorted(st.surfaces.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


def merge_entities(
    keys: Dict[str, KeyStats],
    kept: List[str],
    embed: Optional[Callable[[List[str]], np.ndarray]],
    *,
    string_threshold: float,
    embed_threshold: float,
) -> Tuple[Dict[str, Entity], Dict[str, str], np.ndarray]:
    """Canonical entities, key -> entity id, and entity embeddings (rows = sorted entity ids)."""
    names = [_surface(keys[k]) for k in kept]
    emb = embed(names) if (embed is not None and kept) else None
    groups = canonical_groups(kept, emb, string_threshold, embed_threshold)
    entities: Dict[str, Entity] = {}
    key_to_id: Dict[str, str] = {}
    rep_row: Dict[str, int] = {}
    for grp in groups:
        rep = min(grp, key=lambda i: (-len(keys[kept[i]].units), len(kept[i]), kept[i]))
        eid = "E:" + kept[rep]
        units: Set[str] = set()
        types: Counter = Counter()
        aliases: Set[str] = set()
        for i in grp:
            st = keys[kept[i]]
            units |= st.units
            types.update(st.types)
            aliases.update(st.surfaces)
            key_to_id[kept[i]] = eid
        name = names[rep]
        aliases.discard(name)
        entities[eid] = Entity(
            id=eid,
            name=name,
            type=sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))[0][0],
            description=keys[kept[rep]].description,
            unit_ids=sorted(units),
            aliases=sorted(aliases),
        )
        rep_row[eid] = rep
    ids = sorted(entities)
    if emb is None or not ids:
        matrix = np.zeros((len(ids), 0), dtype=np.float32)
    else:
        matrix = np.asarray(emb, dtype=np.float32)[[rep_row[i] for i in ids]]
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    return entities, key_to_id, matrix


def merge_relations(
    extractions: Sequence[UnitExtraction], key_to_id: Dict[str, str]
) -> Dict[Tuple[str, str], Relation]:
    rels: Dict[Tuple[str, str], Relation] = {}
    descs: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    for ex in extractions:
        for r in ex.relations:
            a, b = key_to_id.get(normalize_name(r.source)), key_to_id.get(normalize_name(r.target))
            if a is None or b is None or a == b:
                continue
            k = (min(a, b), max(a, b))
            rel = rels.setdefault(k, Relation(k[0], k[1], weight=0.0))
            rel.weight += r.weight
            rel.unit_ids.append(ex.unit_id)
            if r.description and r.description not in descs[k] and len(descs[k]) < 3:
                descs[k].append(r.description)
    for k, rel in rels.items():
        rel.description = "; ".join(descs[k])
        rel.unit_ids = sorted(set(rel.unit_ids))
    return rels


@dataclass
class MentionIndex:
    sentences: List[str]
    sentence_unit: List[str]
    sentence_entities: List[Set[str]]
    entity_sentences: Dict[str, List[int]]
    cue: np.ndarray


def mention_index(units: Sequence[Tuple[str, str]], key_to_id: Dict[str, str]) -> MentionIndex:
    """Split every unit ``(id, text)`` into sentences and find the entities each mentions."""
    max_words = max((len(k.split()) for k in key_to_id), default=1)
    sentences: List[str] = []
    sunit: List[str] = []
    sents_ents: List[Set[str]] = []
    ent_sents: Dict[str, List[int]] = defaultdict(list)
    for uid, text in units:
        for s in split_sentences(text):
            found = find_mentions(s, key_to_id, max_words) if key_to_id else set()
            idx = len(sentences)
            sentences.append(s)
            sunit.append(uid)
            sents_ents.append(found)
            for e in found:
                ent_sents[e].append(idx)
    cue = np.array([has_causal_cue(s) for s in sentences], dtype=bool)
    return MentionIndex(sentences, sunit, sents_ents, dict(ent_sents), cue)


def count_cues(rels: Dict[Tuple[str, str], Relation], mi: MentionIndex) -> None:
    """``cue_count`` of a relation = cue sentences mentioning both of its entities (in place)."""
    for s in np.flatnonzero(mi.cue):
        ents = sorted(mi.sentence_entities[s])
        for i, a in enumerate(ents):
            for b in ents[i + 1 :]:
                r = rels.get((a, b))
                if r is not None:
                    r.cue_count += 1
