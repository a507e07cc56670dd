"""CausalGraphIndex updates: insert, delete, refresh; reuse of extractions, summaries, embeddings
and judgements; bad input; durability; queries during an update."""

from __future__ import annotations

import json
import logging
import re
import threading

import numpy as np
import pytest
from llama_index.core import Document, Settings
from llama_index.core.schema import MetadataMode

from _causal_graph_helpers import TOPICS, HashEmbedding, ScriptedLLM, corpus
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex, build_stages
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy, module_paths

ALL = [e for ents in TOPICS.values() for e in ents] + ["zebra mussels", "lake clarity"]
Q = "what leads to wheat yield and nitrogen fertilizer?"


def extraction_json(text: str) -> str:
    found = [e for e in ALL if e in text]
    rels = [{"source": a, "target": b, "description": "linked", "strength": 7} for a, b in zip(found, found[1:])]
    return json.dumps(
        {"entities": [{"name": e, "type": "thing", "description": f"about {e}"} for e in found], "relations": rels}
    )


def script(prompt: str, i: int) -> str:
    if prompt.startswith("Extract the key entities"):
        return extraction_json(prompt.split("Text:\n", 1)[1])
    if "community of a knowledge graph" in prompt:
        names = re.findall(r"^- ([^:\n]+):", prompt, re.M)
        return json.dumps({"title": "About " + ", ".join(names[:2]), "summary": f"Covers {len(names)} entities."})
    if prompt.startswith("Two topics"):
        return "yes - one drives the other" if i % 3 == 0 else "no - unrelated"
    raise AssertionError(f"unexpected prompt: {prompt[:60]}")


def kinds(prompts):
    out = {"extract": 0, "summary": 0, "gate": 0}
    for p in prompts:
        out["extract" if p.startswith("Extract") else "summary" if "community of a" in p else "gate"] += 1
    return out


class CountingEmbedding(HashEmbedding):
    """Records every text embedded (documents, names, summaries), not queries."""

    def __init__(self, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "texts", [])

    def _get_text_embedding(self, text):
        self.texts.append(text)
        return self._vec(text)


class OtherEmbedding(HashEmbedding):
    model_name: str = "another-model"


@pytest.fixture(autouse=True)
def _no_settings_llm(monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)


def offline(docs, **kw):
    return CausalGraphIndex.from_documents(
        docs, embed_model=kw.pop("embed_model", HashEmbedding()), show_progress=False, min_entity_units=1, **kw
    )


def scripted(docs, tmp_path, name="cache", **kw):
    llm = ScriptedLLM(script)
    idx = CausalGraphIndex.from_documents(
        docs,
        llm=llm,
        embed_model=kw.pop("embed_model", HashEmbedding()),
        cache_dir=str(tmp_path / name),
        show_progress=False,
        max_cluster_size=3,
        **kw,
    )
    return idx, llm


def ids(nodes):
    return [n.node.node_id for n in nodes]


# ---- insert ---------------------------------------------------------------------------------
def test_insert_then_retrieve_finds_the_new_documents():
    docs = corpus(3)
    idx = offline(docs[:9])
    assert not any(u.node_id.startswith("wheat") for u in idx.units)
    idx.insert(docs[9:])
    assert [u.node_id for u in idx.units] == [u.node_id for u in offline(docs).units]
    assert {"E:wheat yield", "E:nitrogen fertilizer"} <= set(idx.graph.entities)
    top = ids(idx.as_retriever(similarity_top_k=3).retrieve(Q))
    assert top and all(t.startswith("wheat") for t in top), top
    assert idx.build_stats["update"]["verb"] == "insert" and idx.build_stats["llm_calls"] == 0


def test_insert_extracts_new_units_only_and_keeps_unchanged_modules(tmp_path):
    docs = corpus(3)
    emb = CountingEmbedding()
    idx, llm = scripted(docs[:9], tmp_path, embed_model=emb)
    _ = idx.unit_embeddings  # computed before the insert: only the new units' rows are added
    old = {m.id: (m.level, sorted(m.members), m.title, m.summary) for m in idx.graph.modules.values()}
    old_row = dict(zip(idx.module_ids, idx.module_embeddings))
    old_judged = dict(idx._state.update.judgements)
    old_names = {e.name for e in idx.graph.entities.values()}
    n_prompts, n_texts = len(llm.prompts), len(emb.texts)
    idx.insert(docs[9:])
    asked, embedded = kinds(llm.prompts[n_prompts:]), emb.texts[n_texts:]
    upd = idx.build_stats["update"]
    kept = {m for m in idx.graph.modules if m in old}
    assert kept == set(old), "an insert leaves every old module as it was"
    assert kept and upd["modules_kept"] == len(kept) and upd["modules_changed"] == len(idx.graph.modules) - len(kept)
    for m in kept:  # same id: same level, members, title, summary and embedding row
        mod = idx.graph.modules[m]
        assert (mod.level, sorted(mod.members), mod.title, mod.summary) == old[m]
        np.testing.assert_array_equal(idx.module_embeddings[idx.module_ids.index(m)], old_row[m])
    changed = [m for m in idx.graph.modules.values() if m.id not in kept]
    assert asked["extract"] == 3 == upd["units_extracted"]  # the three wheat units, nothing else
    assert (
        asked["summary"] == sum(len(m.members) >= 2 for m in changed) == idx.build_stats["cost"]["summaries"]["calls"]
    )
    new_judged = idx._state.update.judgements
    rejudged = [k for k in new_judged if not (k[0] in kept and k[1] in kept and k in old_judged)]
    assert asked["gate"] == len(rejudged) == upd["pairs_judged"] > 0
    assert all(new_judged[k] is old_judged[k] for k in new_judged if k not in rejudged)
    assert not old_names & set(embedded), "names embedded before are reused"
    assert not {f"{t}. {s}" for _, _, t, s in old.values()} & set(embedded), "kept summaries are not re-embedded"
    unit_text = {u.node_id: u.get_content(metadata_mode=MetadataMode.EMBED) for u in idx.units}
    assert sorted(t for t in embedded if t in unit_text.values()) == sorted(
        t for u, t in unit_text.items() if u.startswith("wheat")
    )  # the new units only
    assert idx.unit_embeddings.shape[0] == len(idx.units) == 12
    full, full_llm = scripted(docs, tmp_path, name="fresh")
    assert sum(asked.values()) == idx.build_stats["llm_calls"] < len(full_llm.prompts)
    assert sorted(idx.graph.entities) == sorted(full.graph.entities)


def test_insert_of_a_document_extending_existing_entities_changes_no_module(tmp_path):
    docs = corpus(2)
    idx, llm = scripted(docs, tmp_path)
    before = idx.graph.to_dict()
    n = len(llm.prompts)
    idx.insert(Document(id_="more", text="Severe drought stress leads to tree mortality. Low soil moisture follows."))
    after = idx.graph.to_dict()
    assert kinds(llm.prompts[n:]) == {"extract": 1, "summary": 0, "gate": 0}
    assert after["modules"] == before["modules"] and after["gates"] == before["gates"]
    assert [e["id"] for e in after["entities"]] == [e["id"] for e in before["entities"]]
    assert "more::0" in idx.graph.entities["E:drought stress"].unit_ids
    assert idx.build_stats["update"]["modules_changed"] == 0


def test_insert_nodes_equals_insert_of_their_documents():
    from llama_index_ext_causalrag.causal_graph.index import split_units

    docs = corpus(3)
    by_docs, by_nodes = offline(docs[:9]), offline(docs[:9])
    by_docs.insert(docs[9:])
    by_nodes.insert_nodes(split_units(docs[9:], 256, 0))
    assert by_nodes.graph.to_dict() == by_docs.graph.to_dict()
    assert by_nodes.build_stats["update"]["verb"] == "insert_nodes"


# ---- delete ---------------------------------------------------------------------------------
ZEBRA = Document(id_="zebra", text="Zebra mussels raise lake clarity. Zebra mussels cause coral bleaching.")


def test_delete_removes_mentions_orphan_entities_and_resummarises():
    docs = corpus(2) + [ZEBRA]
    idx = offline(docs)
    assert "E:zebra mussel" in idx.graph.entities and any("Zebra" in m.summary for m in idx.graph.modules.values())
    idx.delete_ref_doc("zebra")
    g = idx.graph
    assert not any(u.ref_doc_id == "zebra" for u in idx.units)
    assert "E:zebra mussel" not in g.entities and "E:lake clarity" not in g.entities
    assert all("zebra::0" not in e.unit_ids for e in g.entities.values())
    assert all("zebra::0" not in r.unit_ids for r in g.relations)
    assert "E:coral bleaching" in g.entities  # still mentioned elsewhere
    assert not any("Zebra" in m.summary or "Zebra" in m.title for m in g.modules.values())
    assert not any("Zebra" in gt.reason for gt in g.gates)
    members = {e for m in g.modules.values() for e in m.members}
    assert members == set(g.entities)
    assert not any("zebra" in n.node.node_id for n in idx.as_retriever().retrieve("zebra mussels lake clarity"))


def test_delete_resummarises_modules_whose_entities_lost_mentions():
    said = "Studies of coral bleaching, ocean warming, reef fish, symbiotic algae and marine heatwaves were reported."
    idx = offline(corpus(2) + [Document(id_="extra", text=said)])
    quoting = [m for m in idx.graph.modules.values() if said in m.summary]
    assert quoting
    idx.delete_ref_doc("extra")
    members = {frozenset(m.members) for m in idx.graph.modules.values()}
    assert any(frozenset(m.members) in members for m in quoting), "same members, yet summarised again"
    assert not any(said in m.summary for m in idx.graph.modules.values())
    assert not {m.id for m in quoting} & set(idx.graph.modules)


def test_delete_then_reinsert_gives_back_the_entities_and_relations():
    docs = corpus(2) + [ZEBRA]
    idx, ref = offline(docs), offline(docs).graph.to_dict()
    idx.delete_ref_doc("zebra")
    idx.insert(ZEBRA)
    got = idx.graph.to_dict()
    assert got["entities"] == ref["entities"] and got["relations"] == ref["relations"]
    assert [u.node_id for u in idx.units] == [d.doc_id + "::0" for d in docs]
    assert ids(idx.as_retriever().retrieve("zebra mussels"))[0] == "zebra::0"


# ---- bad input ------------------------------------------------------------------------------
def test_unknown_id_existing_id_and_last_document(caplog):
    docs = corpus(1)
    idx = offline(docs)
    state = idx._state
    with caplog.at_level(logging.WARNING):
        idx.delete_ref_doc("nope")
    assert "'nope' not found" in caplog.text and idx._state is state
    assert idx.refresh_ref_docs([docs[0]]) == [False] and idx._state is state  # same hash: nothing to do
    changed = Document(id_=docs[0].doc_id, text=docs[0].text + " Zebra mussels raise lake clarity.")
    assert idx.refresh_ref_docs([changed, ZEBRA]) == [True, True]
    assert [u.ref_doc_id for u in idx.units] == [d.doc_id for d in docs] + ["zebra"]  # replaced in place
    assert "zebra mussels" in idx.units[0].text.lower()
    with pytest.raises(ValueError, match="refresh_ref_docs"):
        idx.refresh_ref_docs("not a list")
    one = offline([docs[0]])
    with pytest.raises(ValueError, match="without units"):
        one.delete_ref_doc(docs[0].doc_id)


def test_another_embedder_or_a_missing_llm_is_refused(tmp_path):
    docs = corpus(1)
    offline(docs).persist(tmp_path / "o")
    loaded = CausalGraphIndex.from_persist_dir(tmp_path / "o", embed_model=OtherEmbedding())
    with pytest.raises(ValueError, match="another-model"):
        loaded.insert(ZEBRA)
    idx, _ = scripted(docs, tmp_path)
    idx.persist(tmp_path / "s")
    loaded = CausalGraphIndex.from_persist_dir(tmp_path / "s", embed_model=HashEmbedding())
    with pytest.raises(ValueError, match=r"from_persist_dir\(persist_dir, llm=\.\.\.\)"):
        loaded.insert(ZEBRA)


def test_an_index_without_update_data_asks_for_a_rebuild():
    idx = offline(corpus(1))
    idx._state.update = None  # what a folder persisted by an older version loads as
    with pytest.raises(ValueError, match="rebuild it with CausalGraphIndex.from_documents"):
        idx.insert(ZEBRA)


# ---- persistence and durability ---------------------------------------------------------------
def test_a_loaded_index_updates_like_the_one_in_memory(tmp_path):
    docs = corpus(3)
    idx, _ = scripted(docs[:9], tmp_path)
    idx.persist(tmp_path / "ix")
    llm = ScriptedLLM(script)
    loaded = CausalGraphIndex.from_persist_dir(
        tmp_path / "ix", embed_model=HashEmbedding(), llm=llm, cache_dir=str(tmp_path / "loaded_cache")
    )
    loaded.insert(docs[9:], persist_dir=tmp_path / "ix")
    idx.insert(docs[9:])
    assert loaded.graph.to_dict() == idx.graph.to_dict()
    again = CausalGraphIndex.from_persist_dir(tmp_path / "ix", embed_model=HashEmbedding())
    assert again.graph.to_dict() == idx.graph.to_dict() and len(again.units) == 12
    assert kinds(llm.prompts)["extract"] == 3  # the stored extractions of the other units were reused


@pytest.mark.parametrize("step", ["summarise", "causal_gates", "persist"])
def test_a_failed_update_leaves_memory_and_folder_as_they_were(tmp_path, monkeypatch, step):
    docs = corpus(3)
    idx = offline(docs[:9])
    idx.persist(tmp_path / "ix")
    before, state = idx.graph.to_dict(), idx._state

    def boom(*a, **k):
        raise RuntimeError("injected failure")

    if step == "persist":
        monkeypatch.setattr(np, "save", boom)  # the write beside the folder fails
    else:
        monkeypatch.setattr(build_stages, step, boom)
    with pytest.raises(RuntimeError, match="injected"):
        idx.insert(docs[9:], persist_dir=tmp_path / "ix")
    monkeypatch.undo()
    assert idx._state is state and idx.graph.to_dict() == before
    loaded = CausalGraphIndex.from_persist_dir(tmp_path / "ix", embed_model=HashEmbedding())
    assert loaded.graph.to_dict() == before and len(loaded.units) == 9
    assert [p.name for p in tmp_path.iterdir()] == ["ix"], "no half-written folder left beside"


def test_queries_during_an_insert_get_the_old_or_the_new_results(tmp_path):
    docs = corpus(3)

    def slow(prompt, i):
        import time

        time.sleep(0.002)
        return script(prompt, i)

    idx = CausalGraphIndex.from_documents(
        docs[:9],
        llm=ScriptedLLM(slow),
        embed_model=HashEmbedding(),
        cache_dir=str(tmp_path),
        show_progress=False,
        max_cluster_size=3,
    )
    old = ids(idx.as_retriever().retrieve(Q))
    seen, errors, started, done = [], [], threading.Event(), threading.Event()

    def query():
        while not done.is_set():
            try:
                seen.append(ids(idx.as_retriever().retrieve(Q)))
            except Exception as e:  # noqa: BLE001 - the test reports it
                errors.append(e)
            started.set()

    t = threading.Thread(target=query)
    t.start()
    started.wait(10)
    idx.insert(docs[9:])
    done.set()
    t.join(10)
    new = ids(idx.as_retriever().retrieve(Q))
    assert not errors and new != old and len(seen) >= 2
    assert all(s in (old, new) for s in seen)


# ---- the warm-started hierarchy -------------------------------------------------------------
def test_leiden_from_a_previous_hierarchy_keeps_it_when_nothing_moves():
    rng = np.random.default_rng(0)
    nodes = [f"n{i:02d}" for i in range(60)]
    edges = [(nodes[a], nodes[b], 1.0) for a, b in rng.integers(0, 60, size=(200, 2)) if a != b]
    first, _ = leiden_hierarchy(nodes, edges, max_cluster_size=6, seed=1)
    key = lambda mods: sorted((m.level, tuple(m.members)) for m in mods)  # noqa: E731
    again, _ = leiden_hierarchy(nodes, edges, max_cluster_size=6, seed=1, initial=module_paths(first), moved=set())
    assert key(again) == key(first)
    more = nodes + ["new"]
    grown, _ = leiden_hierarchy(
        more, edges + [("new", nodes[0], 5.0)], max_cluster_size=6, seed=1, initial=module_paths(first), moved=set()
    )
    home = [m for m in grown if "new" in m.members and not m.children][0]
    assert nodes[0] in home.members  # the new node joined its neighbour; the others stayed
    assert len(set(key(grown)) & set(key(first))) >= len(first) // 2


def test_select_keys_keeps_held_keys_and_gives_them_ties():
    from llama_index_ext_causalrag.causal_graph.build import KeyStats, select_keys

    keys = {k: KeyStats(units=set(u)) for k, u in {"a": "xyz", "b": "x", "c": "y", "d": "z", "e": "xy"}.items()}
    assert select_keys(keys, 1, 3) == ["a", "b", "e"]  # a build: most units, then by key
    assert select_keys(keys, 1, 3, held={"c"}) == ["a", "c", "e"]  # c wins the tie with b
    assert select_keys(keys, 1, 2, held={"c", "d"}) == ["a", "c", "d", "e"]  # e found in more units joins
    assert select_keys(keys, 2, 1, held={"c"}) == ["a"]  # c is no longer found in 2 units
