"""CausalGraphIndex: pure parts (text, canonicalisation, hierarchy, gates) and the offline build."""

from __future__ import annotations

import itertools
import json
import logging

import numpy as np
import pytest
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.graph_stores.types import KG_NODES_KEY, KG_RELATIONS_KEY
from llama_index.core.schema import Document, TextNode

from _causal_graph_helpers import TOPICS, HashEmbedding, corpus
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex, OfflineEntityExtractor, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.canonical import UnionFind, canonical_groups
from llama_index_ext_causalrag.causal_graph.gates import candidate_pairs
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Module
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy
from llama_index_ext_causalrag.causal_graph.keyphrases import keyphrase_candidates, normalize_name, split_sentences


def test_normalize_name_case_punctuation_plural():
    assert normalize_name("DNA-binding Proteins") == normalize_name("dna binding protein")
    assert normalize_name("Cells") == "cell"
    assert normalize_name("species") == "species"


def test_keyphrase_candidates_skip_stopwords_and_cue_verbs():
    cands = [c for c, _ in keyphrase_candidates("Tree mortality reduces forest carbon storage in the DNA.")]
    assert cands == ["Tree mortality", "forest carbon storage", "DNA"]


def test_split_sentences():
    assert split_sentences("One cell. Two cells! 3 cells grow.") == ["One cell.", "Two cells!", "3 cells grow."]


def test_union_find_groups():
    uf = UnionFind(5)
    uf.union(0, 3)
    uf.union(3, 4)
    assert uf.groups() == [[0, 3, 4], [1], [2]]


def test_canonical_groups_by_string_ratio_and_embedding():
    keys = ["type 1 diabetes", "type 2 diabetes", "mitochondrial dna", "mitochondrial dnas", "heat", "warmth"]
    groups = canonical_groups(keys, embeddings=None, string_threshold=0.9, embed_threshold=2.0)
    assert [2, 3] in groups  # near-identical strings merge
    assert [0] in groups and [1] in groups  # never merge names that differ in a number
    emb = np.eye(6)
    emb[5] = emb[4] + 0.01  # heat ~ warmth by embedding only
    groups = canonical_groups(keys, embeddings=emb, string_threshold=0.9, embed_threshold=0.99)
    assert [4, 5] in groups


def test_offline_extractor_counts_cooccurrence_and_fills_kg_metadata():
    node = TextNode(
        text="Drought stress and tree mortality were reported. Drought stress causes tree mortality. Soil moisture."
    )
    ex = OfflineEntityExtractor().extract([node])[0]
    names = {e.name for e in ex.entities}
    assert {"Drought stress", "tree mortality", "Soil moisture"} <= names
    rel = [r for r in ex.relations if {r.source, r.target} == {"Drought stress", "tree mortality"}]
    assert len(rel) == 1 and rel[0].weight == 2.0
    OfflineEntityExtractor()([node])
    assert {n.name for n in node.metadata[KG_NODES_KEY]} >= {"Drought stress", "tree mortality"}
    assert len(node.metadata[KG_RELATIONS_KEY]) == len(ex.relations)


def test_offline_extractor_feeds_property_graph_index():
    from llama_index.core import PropertyGraphIndex

    from _causal_graph_helpers import ScriptedLLM

    docs = corpus(1)
    pg = PropertyGraphIndex.from_documents(
        docs,
        llm=ScriptedLLM(lambda p, i: "unused"),
        kg_extractors=[OfflineEntityExtractor()],
        embed_model=MockEmbedding(embed_dim=8),
        embed_kg_nodes=False,
        use_async=False,
    )
    triplets = pg.property_graph_store.get_triplets(entity_names=["drought stress", "Drought stress"])
    assert len(pg.property_graph_store.graph.nodes) > 10
    assert triplets and all(t[1].label == "CO_OCCURS_WITH" for t in triplets)


def _hier_invariants(modules, nodes):
    by_id = {m.id: m for m in modules}
    leaves = [m for m in modules if m.level == 0]
    covered = sorted(e for m in leaves for e in m.members)
    assert covered == sorted(nodes)  # H0 is a partition of all entities
    for m in modules:
        for c in m.children:
            assert by_id[c].parent == m.id and by_id[c].level < m.level
            assert set(by_id[c].members) <= set(m.members)
        if m.children:
            assert sorted(e for c in m.children for e in by_id[c].members) == sorted(m.members)


def test_leiden_hierarchy_is_seeded_and_nested():
    rng = np.random.default_rng(0)
    nodes = [f"n{i:03d}" for i in range(120)]
    edges = []
    for block in range(6):
        members = nodes[block * 20 : (block + 1) * 20]
        edges += [(a, b, 1.0) for a, b in itertools.combinations(members, 2) if rng.random() < 0.3]
    edges += [(nodes[i], nodes[(i + 37) % 120], 0.2) for i in range(0, 120, 7)]
    m1, _ = leiden_hierarchy(nodes, edges, max_cluster_size=8, max_levels=4, seed=3)
    m2, _ = leiden_hierarchy(nodes, edges, max_cluster_size=8, max_levels=4, seed=3)
    assert [(m.id, m.members) for m in m1] == [(m.id, m.members) for m in m2]
    assert max(m.level for m in m1) >= 1
    _hier_invariants(m1, nodes)


def test_giant_module_gets_a_clear_message():
    nodes = [f"x{i}" for i in range(30)]
    edges = [(a, b, 1.0) for a, b in itertools.combinations(nodes, 2)]  # one clique
    modules, messages = leiden_hierarchy(nodes, edges, max_cluster_size=10)
    assert len(modules) == 1 and len(modules[0].members) == 30
    assert len(messages) == 1 and "30 entities" in messages[0] and "resolution" in messages[0]


def test_candidate_pairs_only_distant_and_at_most_k_per_module():
    mods = [Module(f"m{i}", 0, [f"e{i}"], parent="p0" if i < 2 else f"p{i}") for i in range(6)]
    E = np.eye(6) + 0.1
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    pairs, n_distant = candidate_pairs(mods, E, adjacent={("m2", "m3")}, blocked={("m4", "m5")}, k=1)
    keys = {(mods[a].id, mods[b].id) for a, b, _ in pairs}
    assert ("m0", "m1") not in keys and ("m2", "m3") not in keys and ("m4", "m5") not in keys
    assert n_distant == 15 - 3
    per_module = {m.id: 0 for m in mods}
    for a, b in keys:
        per_module[a] += 1
        per_module[b] += 1
    assert len(keys) <= 6 and all(v >= 1 for v in per_module.values())


def _build(docs, **kw):
    kw.setdefault("embed_model", HashEmbedding())
    kw.setdefault("max_cluster_size", 3)
    kw.setdefault("show_progress", False)
    return CausalGraphIndex.from_documents(docs, **kw)


def test_offline_build_graph_hierarchy_gates_and_stats(caplog):
    with caplog.at_level(logging.WARNING):
        idx = _build(corpus(3), gate_candidates_per_module=3, gate_judge=OfflineGateJudge(min_lift=1.0))
    assert "no LLM configured" in caplog.text
    g = idx.graph
    names = {e.name.lower() for e in g.entities.values()}
    assert {"drought stress", "insulin resistance", "coral bleaching", "wheat yield"} <= names
    _hier_invariants(list(g.modules.values()), list(g.entities))
    assert all(e.unit_ids for e in g.entities.values())
    assert all(m.title and m.summary for m in g.modules.values())
    st = idx.build_stats["gates"]
    assert st["judged"] <= st["possible_pairs"]
    assert st["gates"] == len(g.gates) > 0
    gated_topics = set()
    for gate in g.gates:
        a, b = g.modules[gate.source], g.modules[gate.target]
        assert gate.level == a.level == b.level and a.parent != b.parent or a.parent is None
        assert "leads to" in gate.reason
        gated_topics.add(
            frozenset(
                t
                for t, ents in TOPICS.items()
                for m in (a, b)
                if any(g.entities[e].name.lower() in ents for e in m.members)
            )
        )
    assert any(len(t) == 2 for t in gated_topics)  # a gate links two different topics
    for stage in ("extract", "canonicalise", "hierarchy", "summaries", "gates"):
        assert idx.build_stats["cost"][stage]["seconds"] >= 0.0
    assert idx.build_stats["llm_calls"] == 0
    # with summary vectors, every "This leads to" link among the candidate pairs is only 1.6x above
    # chance in this tiny corpus: a stricter lift drops them all
    summ = _build(
        corpus(3), gate_candidates_per_module=3, gate_judge=OfflineGateJudge(min_lift=1.0), module_embedding="summary"
    )
    strict = _build(
        corpus(3), gate_candidates_per_module=3, gate_judge=OfflineGateJudge(min_lift=2.0), module_embedding="summary"
    )
    assert summ.graph.gates and strict.graph.gates == []
    assert strict.build_stats["gates"]["judged"] == summ.build_stats["gates"]["judged"]


def test_module_vectors_are_member_means_unless_summaries_are_asked_for():
    from llama_index_ext_causalrag.causal_graph.index import member_embeddings

    idx = _build(corpus(2))
    assert idx.params["module_embedding"] == "members"
    expected = member_embeddings(idx.graph, idx.module_ids, idx.entity_ids, idx.entity_embeddings)
    np.testing.assert_allclose(idx.module_embeddings, expected, atol=1e-6)
    mid = idx.module_ids[0]
    rows = [idx.entity_ids.index(e) for e in idx.graph.modules[mid].members]
    v = idx.entity_embeddings[rows].mean(axis=0)
    np.testing.assert_allclose(idx.module_embeddings[0], v / np.linalg.norm(v), atol=1e-6)
    summ = _build(corpus(2), module_embedding="summary")
    assert not np.allclose(summ.module_embeddings, idx.module_embeddings)
    assert summ.build_stats["cost"]["embed_summaries"]["seconds"] >= 0.0
    with pytest.raises(ValueError, match="module_embedding must be one of"):
        _build(corpus(2), module_embedding="titles")


def test_persist_round_trip_equality(tmp_path):
    idx = _build(corpus(2))
    idx.persist(tmp_path / "ix")
    files = sorted(p.name for p in (tmp_path / "ix").iterdir())
    assert not any(f.endswith((".pkl", ".pickle")) for f in files)
    loaded = CausalGraphIndex.from_persist_dir(tmp_path / "ix")
    assert loaded.graph.to_dict() == idx.graph.to_dict()
    assert [m.children for m in loaded.graph.modules.values()] == [m.children for m in idx.graph.modules.values()]
    assert [(x.source, x.target, x.score) for x in loaded.graph.gates] == [
        (x.source, x.target, x.score) for x in idx.graph.gates
    ]
    np.testing.assert_array_equal(loaded.entity_embeddings, idx.entity_embeddings)
    np.testing.assert_array_equal(loaded.module_embeddings, idx.module_embeddings)
    assert [u.get_content() for u in loaded.units] == [u.get_content() for u in idx.units]
    data = json.loads((tmp_path / "ix" / "graph.json").read_text())
    assert [e["id"] for e in data["entities"]] == sorted(e["id"] for e in data["entities"])
    assert json.loads((tmp_path / "ix" / "params.json").read_text())["format_version"] == 2
    idx.persist(tmp_path / "ix2")
    assert (tmp_path / "ix" / "graph.json").read_bytes() == (tmp_path / "ix2" / "graph.json").read_bytes()


def test_build_is_deterministic():
    a, b = _build(corpus(2)), _build(corpus(2))
    assert a.graph.to_dict() == b.graph.to_dict()


def test_empty_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="empty corpus"):
        _build([])
    with pytest.raises(ValueError, match="empty corpus"):
        _build([Document(text="   ")])


def test_corpus_without_entities_builds_an_empty_graph(caplog, tmp_path):
    docs = [Document(text="It is what it was. And so on, and so forth."), Document(text="Of the, by the, for the.")]
    with caplog.at_level(logging.WARNING):
        idx = _build(docs)
    assert len(idx.graph.entities) == 0 and len(idx.graph.modules) == 0 and idx.graph.gates == []
    assert "no entities were extracted from 2 units" in caplog.text
    idx.persist(tmp_path / "e")
    assert len(CausalGraphIndex.from_persist_dir(tmp_path / "e").graph.entities) == 0


def test_bad_parameters_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="max_cluster_size must be"):
        _build(corpus(1), max_cluster_size=1)
    with pytest.raises(ValueError, match="gate_candidates_per_module"):
        _build(corpus(1), gate_candidates_per_module=-1)
    with pytest.raises(FileNotFoundError, match="params.json missing"):
        CausalGraphIndex.from_persist_dir(tmp_path / "nothing")


def test_graph_from_dict_rejects_other_versions():
    d = CausalGraph().to_dict()
    d["format_version"] = 99
    with pytest.raises(ValueError, match="format_version 99"):
        CausalGraph.from_dict(d)


def test_build_options_are_one_typed_config_and_misspelt_names_are_refused(tmp_path):
    from llama_index_ext_causalrag.causal_graph import CausalGraphBuildConfig

    by_name = _build(corpus(2), seed=7)
    by_config = _build(corpus(2), build_config=CausalGraphBuildConfig(max_cluster_size=3, seed=7))
    assert by_name.graph.to_dict() == by_config.graph.to_dict() and by_name.params == by_config.params
    resolved = by_name.params["min_entity_units"]  # None in the config: the extractor's default
    assert by_name.build_config == CausalGraphBuildConfig(max_cluster_size=3, seed=7, min_entity_units=resolved)
    assert set(CausalGraphBuildConfig().persisted()) <= set(by_name.params)  # params.json holds the config
    by_name.persist(tmp_path / "ix")
    assert CausalGraphIndex.from_persist_dir(tmp_path / "ix").build_config == by_name.build_config
    with pytest.raises(TypeError, match="max_clustr_size"):
        _build(corpus(1), max_clustr_size=3)
    with pytest.raises(TypeError, match="chunk_sise"):
        CausalGraphIndex.estimate(corpus(1), chunk_sise=64)
    with pytest.raises(TypeError):
        CausalGraphIndex.from_nodes(by_name.units, HashEmbedding())  # keywords only after the nodes


def test_update_verbs_take_persist_dir_and_refuse_other_keywords(tmp_path):
    idx = _build(corpus(2))
    extra = Document(id_="extra", text="Drought stress causes tree mortality. Tree mortality leads to canopy gaps.")
    for call in (
        lambda: idx.insert(extra, persist_dir_=tmp_path),
        lambda: idx.insert_nodes([], bogus=1),
        lambda: idx.refresh_ref_docs([extra], persist=tmp_path),
        lambda: idx.delete_ref_doc("no-such-doc", bogus=1),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()
    idx.insert([extra], persist_dir=tmp_path / "ix")  # a list of documents too
    assert "extra" in {u.ref_doc_id for u in CausalGraphIndex.from_persist_dir(tmp_path / "ix").units}
    idx.delete_ref_doc("extra", delete_from_docstore=True, persist_dir=tmp_path / "ix")
    assert "extra" not in {u.ref_doc_id for u in CausalGraphIndex.from_persist_dir(tmp_path / "ix").units}


def test_as_retriever_refuses_overrides_that_are_not_config_fields():
    idx = _build(corpus(2))
    with pytest.raises(TypeError, match="mmr_lamda"):
        idx.as_retriever(mmr_lamda=0.5)
    with pytest.raises(TypeError, match="gama"):
        idx.as_graph_retriever(gama=0.5)
    assert idx.as_retriever(use_filter=False, mmr_lambda=0.5).config.seeding.mmr_lambda == 0.5
    assert {"similarity_top_k", "preset", "use_filter", "llm", "gamma"} <= CausalGraphIndex.RETRIEVER_OPTIONS
