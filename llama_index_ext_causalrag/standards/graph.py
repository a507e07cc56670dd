"""StandardsGraph: section nodes, parthood and citation edges, unit embeddings; JSON + .npy on disk."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document, MetadataMode

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts._nodes_io import load_nodes, save_nodes
from llama_index_ext_causalrag.llm.resolve import model_name_of
from llama_index_ext_causalrag.standards.citations import CitationResolver
from llama_index_ext_causalrag.standards.parser import ParsedDocument, StructuredDocumentParser
from llama_index_ext_causalrag.storage.persistence import (
    IndexWriter,
    PersistedIndex,
    array_dim,
    open_persisted,
    persist_to,
    stable_model_name,
)
from llama_index_ext_causalrag.storage.update_plan import embed_by_document
from llama_index_ext_causalrag.validation import check_documents, public_method

logger = logging.getLogger(__name__)

PART_OF = "part_of"  # child -> parent
CITES = "cites"  # citing unit -> cited section / document root / external placeholder
EXTERNAL_PREFIX = "ext::"
# persisted classes whose folder holds a whole graph
GRAPH_CLASSES = ("StandardsGraph", "StandardsIndex", "StructureAwareRetriever")


class StandardsGraph:
    """A corpus of standards as a directed graph over node ids.

    Nodes: every parsed node (roots, sections, chunks; attribute ``kind``) and external
    placeholders (``ext::RFC8446``, ``ext::RFC8446#4.2``) for citation targets outside the
    corpus. Edges: ``part_of`` (child -> parent) and ``cites`` (citing unit -> target, with the
    citation texts and a count). Embeddings are kept for the retrievable units only, one row
    per id in :attr:`unit_ids`.
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        graph: nx.DiGraph,
        embeddings: Optional[np.ndarray] = None,
        embed_model_name: Optional[str] = None,
    ) -> None:
        self._nodes: Dict[str, BaseNode] = {n.node_id: n for n in nodes}
        self.graph = graph
        self.unit_ids: List[str] = [n.node_id for n in nodes if n.metadata.get("retrievable", True)]
        if not self.unit_ids:
            raise ValueError("StandardsGraph has no retrievable nodes; pass at least one non-empty document.")
        self._unit_pos = {u: i for i, u in enumerate(self.unit_ids)}
        if embeddings is not None and embeddings.shape[0] != len(self.unit_ids):
            raise ValueError(
                f"embeddings must have one row per retrievable node ({len(self.unit_ids)}), got "
                f"{embeddings.shape[0]}; re-embed with StandardsGraph.embed()."
            )
        self.embeddings = embeddings
        self.embed_model_name = embed_model_name
        self.warnings: List[str] = []

    # ---- construction ------------------------------------------------------------------
    @classmethod
    @public_method
    def from_documents(
        cls,
        documents: Sequence[Document],
        parser: Optional[StructuredDocumentParser] = None,
        doc_aliases: Optional[Dict[str, str]] = None,
    ) -> "StandardsGraph":
        """Parse ``documents`` and link them. ``doc_aliases`` maps names (``"QUIC-HTTP"``,
        ``"EN 301 489-1"``) to corpus doc ids or designations; the documents' own aliases win."""
        documents = check_documents(documents, invisible="skip")
        parser = parser or StructuredDocumentParser()
        parsed = [parser.parse_document(d) for d in documents]
        out = cls.from_parsed(parsed, doc_aliases)
        out._parsed = parsed  # kept for StandardsIndex's incremental updates
        return out

    @classmethod
    def from_parsed(
        cls, parsed: Sequence[ParsedDocument], doc_aliases: Optional[Dict[str, str]] = None
    ) -> "StandardsGraph":
        resolver = CitationResolver([p.index for p in parsed], doc_aliases)
        g = nx.DiGraph()
        nodes: List[BaseNode] = []
        for p in parsed:
            for n in p.nodes:
                nodes.append(n)
                g.add_node(n.node_id, kind=n.metadata["node_kind"], doc_id=p.doc_id)
            for n in p.nodes:
                parent = n.parent_node
                if parent is not None:
                    g.add_edge(n.node_id, parent.node_id, type=PART_OF)
        for p in parsed:
            for unit_id, c in p.citations:
                t = resolver.resolve(c, p.doc_id)
                if t.is_external:
                    target = EXTERNAL_PREFIX + str(t.external)
                    if target not in g:
                        g.add_node(target, kind="external", doc_id=None)
                    if "#" in str(t.external):
                        doc_ph = EXTERNAL_PREFIX + str(t.external).split("#", 1)[0]
                        if doc_ph not in g:
                            g.add_node(doc_ph, kind="external", doc_id=None)
                        g.add_edge(target, doc_ph, type=PART_OF)
                else:
                    target = f"{t.doc_id}::{t.section_key}"
                section_of_unit = g.nodes[unit_id]["kind"] == "chunk" and next(
                    (v for _, v, d in g.out_edges(unit_id, data=True) if d["type"] == PART_OF), None
                )
                if target == unit_id or target == section_of_unit:
                    continue  # a section citing itself adds nothing
                if g.has_edge(unit_id, target) and g.edges[unit_id, target]["type"] == CITES:
                    e = g.edges[unit_id, target]
                    e["count"] += 1
                    if c.raw not in e["texts"] and len(e["texts"]) < 5:
                        e["texts"].append(c.raw)
                elif not g.has_edge(unit_id, target):
                    g.add_edge(unit_id, target, type=CITES, count=1, texts=[c.raw])
        out = cls(nodes, g)
        for p in parsed:
            out.warnings.extend(p.warnings)
        return out

    @classmethod
    def from_flat_nodes(cls, nodes: Sequence[BaseNode]) -> "StandardsGraph":
        """No structure: every node is a unit and there are no edges (the "flat" ablation)."""
        g = nx.DiGraph()
        for n in nodes:
            g.add_node(n.node_id, kind="chunk", doc_id=n.ref_doc_id)
        return cls(list(nodes), g)

    def embed(self, embed_model: Optional[BaseEmbedding] = None, show_progress: bool = False) -> "StandardsGraph":
        """Embed every unit's text (with its section path) and keep the matrix; one document per
        batch, so an insert embeds a unit exactly as a rebuild does."""
        model = resolve_embed_model(embed_model)
        texts = [self._nodes[u].get_content(metadata_mode=MetadataMode.EMBED) for u in self.unit_ids]
        keys = [str(self.graph.nodes[u].get("doc_id")) if u in self.graph else "" for u in self.unit_ids]
        self.embeddings = embed_by_document(model, texts, keys, show_progress)  # batches never mix documents
        self.embed_model_name = model_name_of(model)
        return self

    # ---- access ------------------------------------------------------------------------
    @property
    def units(self) -> List[BaseNode]:
        return [self._nodes[u] for u in self.unit_ids]

    def node(self, node_id: str) -> BaseNode:
        return self._nodes[node_id]

    def has_node(self, node_id: str) -> bool:
        return node_id in self._nodes

    def unit_index(self, node_id: str) -> Optional[int]:
        return self._unit_pos.get(node_id)

    def edges(self, kind: Optional[str] = None) -> List[Tuple[str, str]]:
        """Sorted ``(source, target)`` pairs, optionally of one edge type."""
        return sorted((u, v) for u, v, d in self.graph.edges(data=True) if kind is None or d["type"] == kind)

    def parent(self, node_id: str) -> Optional[str]:
        for _, v, d in self.graph.out_edges(node_id, data=True):
            if d["type"] == PART_OF:
                return v
        return None

    def children(self, node_id: str) -> List[str]:
        return [u for u, _, d in self.graph.in_edges(node_id, data=True) if d["type"] == PART_OF]

    def cited(self, node_id: str) -> List[str]:
        return [v for _, v, d in self.graph.out_edges(node_id, data=True) if d["type"] == CITES]

    def citing(self, node_id: str) -> List[str]:
        return [u for u, _, d in self.graph.in_edges(node_id, data=True) if d["type"] == CITES]

    def section_of(self, node_id: str) -> str:
        """The section a unit belongs to: its parent for a chunk, itself otherwise."""
        kind = self.graph.nodes[node_id].get("kind") if node_id in self.graph else None
        if kind == "chunk":
            return self.parent(node_id) or node_id
        return node_id

    def units_of(self, node_id: str) -> List[str]:
        """Retrievable units standing for ``node_id``: itself, its chunks, or (for a heading-only
        section) its child sections' units. External placeholders have none."""
        if node_id in self._unit_pos:
            return [node_id]
        if node_id not in self._nodes:
            return []
        holder = self._nodes[node_id].metadata.get("merged_into")
        if holder in self._unit_pos:  # a small subsection kept whole inside its ancestor's unit
            return [holder]
        kids = self.children(node_id)
        chunks = [k for k in kids if self.graph.nodes[k].get("kind") == "chunk"]
        if chunks:
            return [c for c in chunks if c in self._unit_pos]
        out: List[str] = []
        for k in kids:
            if k in self._unit_pos:
                out.append(k)
            else:
                out.extend(
                    c for c in self.children(k) if c in self._unit_pos and self.graph.nodes[c].get("kind") == "chunk"
                )
        return out

    def unit_neighbours(self, unit_id: str, siblings: bool = True) -> Dict[str, List[List[str]]]:
        """Structural neighbours of a unit, by relation, as groups of unit ids (one group per
        neighbouring node: a chunked section is a group of its chunks).

        ``parent``: the parent section; ``child``: each child section; ``same_section``: the
        other chunks of a chunked section (one group each); ``sibling``: the sections sharing
        the parent; ``cites``: each node this unit cites; ``cited_by``: each unit citing this
        unit or its section. External placeholders and the unit itself are left out.
        """
        sec = self.section_of(unit_id)
        out: Dict[str, List[List[str]]] = {}
        par = self.parent(sec)
        if par is not None:
            out["parent"] = [self.units_of(par)]
            if siblings:
                out["sibling"] = [self.units_of(s) for s in self.children(par) if s != sec]
        out["child"] = [self.units_of(s) for s in self.children(sec) if self.graph.nodes[s].get("kind") != "chunk"]
        if sec != unit_id:
            out["same_section"] = [[u] for u in self.units_of(sec) if u != unit_id]
        out["cites"] = [self.units_of(t) for t in self.cited(unit_id)]
        out["cited_by"] = [[u] for t in sorted({unit_id, sec}) for u in self.citing(t) if u in self._unit_pos]
        cleaned: Dict[str, List[List[str]]] = {}
        for k, groups in out.items():
            gs = [[u for u in grp if u != unit_id] for grp in groups]
            cleaned[k] = [grp for grp in gs if grp]
        return cleaned

    def degree(self, unit_id: str) -> int:
        """Hub degree: citation and parthood links of the unit's section (chunk links not counted)."""
        sec = self.section_of(unit_id)
        n = len([c for c in self.children(sec) if self.graph.nodes[c].get("kind") != "chunk"])
        n += 1 if self.parent(sec) is not None else 0
        n += len(self.citing(sec)) + len(self.citing(unit_id)) + len(self.cited(unit_id))
        return n

    def adjacency(
        self, relations: Iterable[str] = ("parent", "child", "sibling", "same_section", "cites", "cited_by")
    ) -> np.ndarray:
        """0/1 unit-by-unit matrix of the given relations (symmetrised), shape ``(n_units, n_units)``."""
        rel = set(relations)
        n = len(self.unit_ids)
        a = np.zeros((n, n), dtype=np.float32)
        for i, u in enumerate(self.unit_ids):
            for r, groups in self.unit_neighbours(u, siblings="sibling" in rel).items():
                if r in rel:
                    for v in (v for grp in groups for v in grp):
                        j = self._unit_pos[v]
                        a[i, j] = a[j, i] = 1.0
        np.fill_diagonal(a, 0.0)
        return a

    # ---- persistence -------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """Graph as plain JSON data, nodes and edges sorted by id."""
        return {
            "nodes": [{"id": n, **self.graph.nodes[n]} for n in sorted(self.graph.nodes)],
            "edges": [
                {"source": u, "target": v, **d}
                for u, v, d in sorted(self.graph.edges(data=True), key=lambda e: (e[0], e[1]))
            ],
        }

    def persist(self, persist_dir: str | Path) -> None:
        """``graph.json``, ``nodes.json``, ``embeddings.npy`` (units, if embedded), ``params.json``
        and ``manifest.json``, swapped in atomically: no file of an earlier index survives."""
        with persist_to(persist_dir, type(self).__name__) as w:
            self._persist_files(w)

    STATE_FIELDS = ("_nodes", "graph", "unit_ids", "_unit_pos", "embeddings", "embed_model_name", "warnings")

    def state(self) -> "StandardsGraph":
        """What this graph holds, as a plain :class:`StandardsGraph` sharing its data (what an
        index hands its backend: the state, not the index)."""
        st = StandardsGraph.__new__(StandardsGraph)
        st.__dict__.update({k: self.__dict__[k] for k in self.STATE_FIELDS if k in self.__dict__})
        return st

    def _persist_files(self, w: IndexWriter) -> None:
        """Write the graph's files and params into ``w`` (shared with the retriever's persist)."""
        w.write_json("graph.json", self.to_dict(), ensure_ascii=False)
        save_nodes(list(self._nodes.values()), w.dir / "nodes.json")
        if self.embeddings is not None:
            w.save_array("embeddings.npy", self.embeddings)
        w.rows.update(nodes=len(self._nodes), units=len(self.unit_ids))
        w.params.update(
            unit_ids=self.unit_ids,
            embed_model=stable_model_name(self.embed_model_name),
            embed_dim=array_dim(self.embeddings),
            warnings=self.warnings,
        )

    @classmethod
    def from_persist_dir(cls, persist_dir: str | Path) -> "StandardsGraph":
        persisted = open_persisted(persist_dir, (cls.__name__, *GRAPH_CLASSES), "graph.persist(dir)")
        return cls._from_persisted(persisted)

    @classmethod
    def _from_persisted(cls, persisted: PersistedIndex) -> "StandardsGraph":
        g = graph_from_dict(persisted.json("graph.json"))
        nodes = load_nodes(persisted.path("nodes.json"))
        persisted.check_rows("nodes", len(nodes))
        emb = persisted.array("embeddings.npy") if persisted.has("embeddings.npy") else None
        out = cls(nodes, g, emb, persisted.params.get("embed_model"))
        if out.unit_ids != persisted.params["unit_ids"]:
            raise ValueError(
                f"{persisted.dir}: nodes.json and params.json disagree on the retrievable nodes; rebuild the graph."
            )
        out.warnings = list(persisted.params.get("warnings", []))
        return out


def graph_from_dict(data: Dict[str, Any]) -> nx.DiGraph:
    """The graph of :meth:`StandardsGraph.to_dict`."""
    g = nx.DiGraph()
    for n in data["nodes"]:
        g.add_node(n["id"], **{k: v for k, v in n.items() if k != "id"})
    for e in data["edges"]:
        g.add_edge(e["source"], e["target"], **{k: v for k, v in e.items() if k not in ("source", "target")})
    return g
