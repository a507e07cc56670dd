"""Row ids of the vector store: ``uuid5(node id)`` for a new index, node ids for an index whose
parameters name no scheme (built by an earlier version), which still reopens and updates."""

import json
import uuid

import pytest
from llama_index.core import Settings, StorageContext
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_causalrag import MultiGranularityIndex, StandardsIndex
from llama_index_ext_causalrag.storage import row_ids as rows
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY, PARAM_KEY, ROW_NAMESPACE, RowIds, row_id
from store_helpers import (
    RandomEmbedding,
    causal_case,
    pg_docstore,
    pg_kvstore,
    pg_vector_store,
    standards_case,
    stored_node_ids,
)


@pytest.fixture(autouse=True)
def _no_settings_llm(monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)


def node():
    return TextNode(
        id_="doc0::s0-2",
        text="Sentence one. Sentence two.",
        metadata={"title": "paper 0"},
        excluded_llm_metadata_keys=["title"],
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc0")},
    )


# ---- RowIds ---------------------------------------------------------------------------------
def test_row_id_is_uuid5_of_the_node_id_in_a_fixed_namespace():
    assert row_id("doc0::s0-2") == str(uuid.uuid5(ROW_NAMESPACE, "doc0::s0-2")) == row_id("doc0::s0-2", "uuid5")
    assert uuid.UUID(row_id("doc0::s0-2")).version == 5
    assert row_id("doc0::s0-2", "node_id") == "doc0::s0-2"
    assert str(ROW_NAMESPACE) == "6f1c1d6e-6a1e-4c59-9d55-2b1f0b8a4c11"  # changing it orphans every stored row


def test_to_row_and_back_round_trips_and_keeps_the_id_out_of_llm_and_embed_text():
    n, ids = node(), RowIds("uuid5")
    stored = ids.to_row(n, [1.0, 0.0])
    assert stored.node_id == row_id(n.node_id) and stored.metadata[NODE_ID_KEY] == n.node_id
    assert stored.embedding == [1.0, 0.0] and stored.ref_doc_id == "doc0"
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        assert stored.get_content(mode) == n.get_content(mode)
    assert n.node_id == "doc0::s0-2" and NODE_ID_KEY not in n.metadata and n.embedding is None  # input untouched
    back = ids.from_row(stored)
    assert back.model_dump(exclude={"embedding"}) == n.model_dump(exclude={"embedding"})
    assert ids.to_row(back, [1.0, 0.0]).excluded_llm_metadata_keys == ["title", NODE_ID_KEY]  # not twice


def test_node_id_of_a_row_without_payload_uses_the_known_nodes():
    ids = RowIds("uuid5", ["a", "b"])
    assert ids.node_id(row_id("b")) == "b" and ids.node_id("other") == "other"
    bare = TextNode(id_=row_id("a"), text="x")  # a store that keeps no metadata
    assert ids.from_row(bare).node_id == "a"


def test_node_id_scheme_is_the_identity_and_writes_no_parameter():
    ids, n = RowIds("node_id"), node()
    assert not ids.maps and ids.row_ids(["a"]) == ["a"] and ids.node_id("a") == "a"
    assert ids.to_row(n, [1.0]).model_dump(exclude={"embedding"}) == n.model_dump(exclude={"embedding"})
    assert ids.params() == {} and RowIds("uuid5").params() == {PARAM_KEY: "uuid5"}
    assert RowIds.from_params({}).scheme == "node_id" and RowIds.from_params({PARAM_KEY: "uuid5"}).scheme == "uuid5"


def test_unknown_scheme_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match=r"vector_store_ids must be one of \('uuid5', 'node_id'\), got 'int'"):
        RowIds.from_params({PARAM_KEY: "int"})


# ---- the indexes ----------------------------------------------------------------------------
def umg_case():
    from test_multigranularity_store import DIM, GS, QUERIES, make_docs

    return MultiGranularityIndex, make_docs(), dict(granularities=GS), lambda: RandomEmbedding(dim=DIM), QUERIES


CASES = {"umgp": umg_case, "standards": standards_case, "causalrag2": causal_case}


def build(cls, documents, kw, model, vs, ds, kv):
    return cls.from_documents(
        documents,
        embed_model=model(),
        kvstore=kv,
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        **kw,
    )


def unit_ids(index):
    return set(index.unit_ids) if isinstance(index, StandardsIndex) else {u.node_id for u in index.units}


def params(index, tmp_path):
    index.persist(tmp_path / "state")
    return json.loads((tmp_path / "state" / "params.json").read_text())


def same_results(a, b, queries):
    for q in queries:
        assert [n.node.node_id for n in a.as_retriever().retrieve(q)] == [
            n.node.node_id for n in b.as_retriever().retrieve(q)
        ], q


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_new_index_records_uuid5_rows(name, tmp_path):
    cls, documents, kw, model, queries = CASES[name]()
    vs = SimpleVectorStore()
    index = build(cls, documents, kw, model, vs, SimpleDocumentStore(), SimpleKVStore())
    assert params(index, tmp_path)[PARAM_KEY] == "uuid5"
    assert stored_node_ids(vs, "uuid5") == unit_ids(index)


def legacy_then_current(monkeypatch, cls, documents, kw, model, stores):
    """Build as earlier versions did (rows under node ids, no PARAM_KEY), then switch back to this version."""
    monkeypatch.setattr(rows, "NEW_INDEX_SCHEME", "node_id")
    built = build(cls, documents, kw, model, *stores)
    monkeypatch.undo()
    assert rows.NEW_INDEX_SCHEME == "uuid5"
    return built


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_index_with_node_id_rows_reopens_and_updates_in_its_scheme(name, tmp_path, monkeypatch):
    cls, documents, kw, model, queries = CASES[name]()
    first, extra, gone = documents[:-1], documents[-1], documents[0].doc_id
    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    built = legacy_then_current(monkeypatch, cls, first, kw, model, (vs, ds, kv))
    memory = cls.from_documents(first, embed_model=model(), **kw)
    assert stored_node_ids(vs, "node_id") == unit_ids(memory)
    reopened = cls.from_vector_store(vs, ds, kvstore=kv, embed_model=model())
    same_results(reopened, memory, queries)
    # a reopened StandardsIndex cannot update (it keeps no parsed documents): update the one built
    updated = built if cls is StandardsIndex else reopened
    for ix in (memory, updated):
        ix.insert(extra)
        ix.delete_ref_doc(gone)
    assert stored_node_ids(vs, "node_id") == unit_ids(memory)  # still under node ids, the deleted ones gone
    same_results(updated, memory, queries)
    assert PARAM_KEY not in params(updated, tmp_path)  # its files stay as the earlier versions wrote them
    same_results(cls.from_vector_store(vs, ds, kvstore=kv, embed_model=model()), memory, queries)


@pytest.mark.postgres
def test_a_postgres_table_with_node_id_rows_reopens_and_updates(pg_url, pg_table, monkeypatch):
    from test_multigranularity_store import DIM

    cls, documents, kw, model, queries = umg_case()
    first, extra, gone = documents[:-1], documents[-1], documents[0].doc_id
    stores = (
        pg_vector_store(pg_url, pg_table, DIM),
        pg_docstore(pg_url, pg_table + "_docs"),
        pg_kvstore(pg_url, pg_table + "_kv"),
    )
    legacy_then_current(monkeypatch, cls, first, kw, model, stores)
    vs, ds, kv = (
        pg_vector_store(pg_url, pg_table, DIM),
        pg_docstore(pg_url, pg_table + "_docs"),
        pg_kvstore(pg_url, pg_table + "_kv"),
    )
    memory = cls.from_documents(first, embed_model=model(), **kw)
    reopened = cls.from_vector_store(vs, ds, kvstore=kv, embed_model=model())
    same_results(reopened, memory, queries)
    for ix in (memory, reopened):
        ix.insert(extra)
        ix.delete_ref_doc(gone)
    assert stored_node_ids(vs, "node_id") == unit_ids(memory)
    same_results(reopened, memory, queries)
