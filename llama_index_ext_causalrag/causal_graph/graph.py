"""The CausalGraph data model: entities, relations, hierarchy modules and causal gates.

Pure: no ``llama_index`` import. ``to_dict`` sorts everything by id so that two builds of
the same corpus give byte-identical ``graph.json`` files (nano-graphrag ``_stabilize_graph``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

GRAPH_FORMAT_VERSION = 1


@dataclass
class Entity:
    """A canonical entity. ``unit_ids`` are the text units (node ids) it was extracted from."""

    id: str
    name: str
    type: str = "concept"
    description: str = ""
    unit_ids: List[str] = field(default_factory=list)
    aliases: List[str] = field(default_factory=list)


@dataclass
class Relation:
    """An undirected relation between two entities (``source < target``).

    ``weight`` is the co-occurrence count (offline) or the summed strength (LLM);
    ``cue_count`` counts the sentences with a causal cue phrase mentioning both ends.
    """

    source: str
    target: str
    description: str = ""
    weight: float = 1.0
    unit_ids: List[str] = field(default_factory=list)
    cue_count: int = 0

    @property
    def key(self) -> Tuple[str, str]:
        return (self.source, self.target)


@dataclass
class Module:
    """A Leiden module. Level 0 is the finest level, the top partition has the highest level."""

    id: str
    level: int
    members: List[str] = field(default_factory=list)
    parent: Optional[str] = None
    children: List[str] = field(default_factory=list)
    title: str = ""
    summary: str = ""


@dataclass
class Gate:
    """A causal gate: an undirected binary link between two modules of one level."""

    source: str
    target: str
    level: int
    score: float
    reason: str = ""
    judge: str = ""

    @property
    def key(self) -> Tuple[str, str]:
        return (self.source, self.target)


@dataclass
class CausalGraph:
    entities: Dict[str, Entity] = field(default_factory=dict)
    relations: List[Relation] = field(default_factory=list)
    modules: Dict[str, Module] = field(default_factory=dict)
    gates: List[Gate] = field(default_factory=list)

    @property
    def num_levels(self) -> int:
        return 1 + max((m.level for m in self.modules.values()), default=-1)

    def modules_at(self, level: int) -> List[Module]:
        return sorted((m for m in self.modules.values() if m.level == level), key=lambda m: m.id)

    def entity_ids(self) -> List[str]:
        return sorted(self.entities)

    def module_ids(self) -> List[str]:
        return sorted(self.modules)

    def sort(self) -> "CausalGraph":
        """Sort every list in place (ids, members, unit ids); returns ``self``."""
        self.entities = {k: self.entities[k] for k in sorted(self.entities)}
        for e in self.entities.values():
            e.unit_ids = sorted(set(e.unit_ids))
            e.aliases = sorted(set(e.aliases))
        for r in self.relations:
            r.unit_ids = sorted(set(r.unit_ids))
        self.relations.sort(key=lambda r: r.key)
        self.modules = {k: self.modules[k] for k in sorted(self.modules)}
        for m in self.modules.values():
            m.members = sorted(m.members)
            m.children = sorted(m.children)
        self.gates.sort(key=lambda g: (g.level, g.source, g.target))
        return self

    def to_dict(self) -> Dict[str, Any]:
        self.sort()
        return {
            "format_version": GRAPH_FORMAT_VERSION,
            "entities": [asdict(e) for e in self.entities.values()],
            "relations": [asdict(r) for r in self.relations],
            "modules": [asdict(m) for m in self.modules.values()],
            "gates": [asdict(g) for g in self.gates],
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "CausalGraph":
        version = data.get("format_version")
        if version != GRAPH_FORMAT_VERSION:
            raise ValueError(
                f"graph format_version {version!r} is not supported (expected "
                f"{GRAPH_FORMAT_VERSION}); rebuild the index with this package version."
            )
        g = cls(
            entities={d["id"]: Entity(**d) for d in data["entities"]},
            relations=[Relation(**d) for d in data["relations"]],
            modules={d["id"]: Module(**d) for d in data["modules"]},
            gates=[Gate(**d) for d in data["gates"]],
        )
        return g.sort()

    def summary_stats(self) -> Dict[str, Any]:
        per_level = {str(lvl): len(self.modules_at(lvl)) for lvl in range(self.num_levels)}
        return {
            "entities": len(self.entities),
            "relations": len(self.relations),
            "modules": len(self.modules),
            "modules_per_level": per_level,
            "gates": len(self.gates),
        }
