"""The three indexes on Qdrant in local mode (no server: ``QdrantClient(path=...)``), compared
with the in-memory index; skipped without ``llama-index-vector-stores-qdrant``.

Qdrant takes only UUIDs or unsigned integers as point ids, and our node ids are readable
strings (``doc0::s0-2``): ``QdrantVectorStore`` as it is refuses them (first test). The rest
runs on ``UUIDPointIds``, a test-side subclass that stores each node under ``uuid5(node id)``
and keeps the node, with its own id, in the payload. Qdrant normalises vectors of a cosine
collection when it stores them, so the vectors read back (``StandardsIndex``,
``CausalGraphIndex``) and the scores computed from them agree to ~1e-7, not to the bit.
"""

import asyncio
import uuid

import pytest

pytest.importorskip("llama_index.vector_stores.qdrant")

from llama_index.core import Settings, StorageContext  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402
from llama_index.core.storage.kvstore import SimpleKVStore  # noqa: E402
from llama_index.vector_stores.qdrant import QdrantVectorStore  # noqa: E402
from qdrant_client import AsyncQdrantClient, QdrantClient  # noqa: E402

from fakes import HashEmbedding  # noqa: E402
from llama_index_ext_causalrag import CausalGraphIndex, MultiGranularityIndex, StandardsIndex  # noqa: E402
from llama_index_ext_causalrag.causal_graph import (  # noqa: E402
    ExtractiveSummarizer,
    OfflineEntityExtractor,
    OfflineGateJudge,
)
from store_helpers import RandomEmbedding  # noqa: E402

NAMESPACE = uuid.UUID("6f1c1d6e-6a1e-4c59-9d55-2b1f0b8a4c11")
TOL = 1e-6


def point_id(node_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, node_id))


def _ids(node_ids):
    return None if node_ids is None else [point_id(i) for i in node_ids]


class UUIDPointIds(QdrantVectorStore):
    """QdrantVectorStore whose point ids are ``uuid5(node id)``; payloads keep the nodes' ids."""

    def _build_points(self, nodes, sparse_vector_name):
        points, ids = super()._build_points(nodes, sparse_vector_name)
        for p in points:
            p.id = point_id(p.id)
        return points, ids

    def get_nodes(self, node_ids=None, filters=None, limit=None, shard_identifier=None):
        return super().get_nodes(_ids(node_ids), filters, limit, shard_identifier)

    def delete_nodes(self, node_ids=None, filters=None, shard_identifier=None, **kw):
        return super().delete_nodes(_ids(node_ids), filters, shard_identifier, **kw)

    async def adelete_nodes(self, node_ids=None, filters=None, shard_identifier=None, **kw):
        return await super().adelete_nodes(_ids(node_ids), filters, shard_identifier, **kw)


@pytest.fixture(autouse=True)
def _no_settings_llm(monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)


def umg_case():
    from test_multigranularity_store import DIM, GS, QUERIES, make_docs

    return MultiGranularityIndex, make_docs(), dict(granularities=GS), lambda: RandomEmbedding(dim=DIM), QUERIES


def umg_short_case():
    """Documents shorter than the coarsest window: a unit in several granularities' lists
    (the filter ``umg_granularity <= g <= umg_granularity_max`` on int payloads)."""
    from test_multigranularity_store import DIM, QUERIES, SHORT_DOCS_GS, make_short_docs

    return (MultiGranularityIndex, make_short_docs(), dict(granularities=SHORT_DOCS_GS), lambda: RandomEmbedding(dim=DIM),
            QUERIES)


def standards_case():
    from test_standards_store import QUERIES, docs, parser

    return StandardsIndex, docs(), dict(parser=parser()), HashEmbedding, QUERIES


def causal_case():
    from test_causal_graph_store import DIM, QUERIES, make_docs

    kw = dict(extractor=OfflineEntityExtractor(), summarizer=ExtractiveSummarizer(), gate_judge=OfflineGateJudge(),
              show_progress=False, chunk_size=24, max_cluster_size=3, min_entity_units=1)
    return CausalGraphIndex, make_docs(), kw, lambda: RandomEmbedding(dim=DIM), QUERIES


CASES = {"umgp": umg_case, "umgp_short_docs": umg_short_case, "standards": standards_case, "causalrag2": causal_case}


def assert_close(got, want):
    assert [n.node.node_id for n in got] == [n.node.node_id for n in want]
    assert all(abs(a.score - b.score) <= TOL for a, b in zip(got, want))


def test_qdrant_refuses_node_ids_that_are_not_uuids(tmp_path):
    cls, documents, kw, model, _ = umg_case()
    vs, ds = QdrantVectorStore(client=QdrantClient(path=str(tmp_path)), collection_name="units"), SimpleDocumentStore()
    with pytest.raises(ValueError, match="is not a valid UUID"):
        cls.from_documents(documents, embed_model=model(), kvstore=SimpleKVStore(),
                           storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds), **kw)
    assert not ds.docs  # the failed build took its docstore nodes out again
    vs.client.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_on_qdrant_local_equals_in_memory_and_reopens(name, tmp_path):
    cls, documents, kw, model, queries = CASES[name]()
    memory = cls.from_documents(documents, embed_model=model(), **kw)
    path, ds, kv = str(tmp_path / "qdrant"), SimpleDocumentStore(), SimpleKVStore()
    vs = UUIDPointIds(client=QdrantClient(path=path), collection_name="units")  # created by the first add
    built = cls.from_documents(documents, embed_model=model(), kvstore=kv,
                               storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds), **kw)
    for q in queries:
        assert_close(built.as_retriever().retrieve(q), memory.as_retriever().retrieve(q))
    if cls is MultiGranularityIndex:  # each granularity's list, filtered in Qdrant, holds that granularity's units
        for g, expert in built.dense.items():
            want = {u.node_id for u in memory.units if g in u.metadata["umg_granularities"]}
            assert {n.node.node_id for n in expert.with_top_k(len(memory.units)).retrieve(queries[0])} == want, g
    vs.client.close()

    # a second client on the folder, as another process would open it
    vs = UUIDPointIds(client=QdrantClient(path=path), collection_name="units")
    reopened = cls.from_vector_store(vs, ds, kvstore=kv, embed_model=model())
    for q in queries:
        assert_close(reopened.as_retriever().retrieve(q), memory.as_retriever().retrieve(q))

    # local mode lets one client at a time open the folder: the async one replaces the sync one
    vs.client.close()

    async def all_async():
        vs._aclient = AsyncQdrantClient(path=path)
        r = reopened.as_retriever()
        try:
            return await asyncio.gather(*[r.aretrieve(q) for q in queries])
        finally:
            await vs._aclient.close()

    for q, got in zip(queries, asyncio.run(all_async())):
        assert_close(got, memory.as_retriever().retrieve(q))
