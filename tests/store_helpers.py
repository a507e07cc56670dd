"""Helpers for store-backed tests: a tie-free embedder that counts its calls, PGVectorStore on the fixture's server."""

from __future__ import annotations

import hashlib
from typing import List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from pg_fixture import driver_url


class RandomEmbedding(BaseEmbedding):
    """A Gaussian vector seeded by the text's hash: deterministic, offline, no exact ties.
    ``text_calls`` counts texts embedded for indexing, ``query_calls`` queries."""

    dim: int = 32
    text_calls: int = 0
    query_calls: int = 0

    def _vec(self, text: str) -> List[float]:
        seed = int(hashlib.md5(text.encode()).hexdigest()[:8], 16)
        return np.random.default_rng(seed).normal(size=self.dim).tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        self.text_calls += 1
        return self._vec(text)

    def _get_query_embedding(self, query: str) -> List[float]:
        self.query_calls += 1
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        self.query_calls += 1
        return self._vec(query)


def pg_vector_store(pg_url: str, table: str, dim: int):
    """An exact-search (no HNSW) PGVectorStore on the test server."""
    from llama_index.vector_stores.postgres import PGVectorStore

    return PGVectorStore(
        connection_string=driver_url(pg_url, "psycopg2"),
        async_connection_string=driver_url(pg_url, "asyncpg"),
        table_name=table,
        embed_dim=dim,
    )


def pg_docstore(pg_url: str, table: str):
    """A PostgresDocumentStore (LlamaIndex's KV docstore on a PostgreSQL table) on the test server."""
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    kv = PostgresKVStore(
        table_name=table,
        connection_string=driver_url(pg_url, "psycopg2"),
        async_connection_string=driver_url(pg_url, "asyncpg"),
    )
    return PostgresDocumentStore(kv)


def pg_kvstore(pg_url: str, table: str):
    """A PostgresKVStore (one table; an index's state is one collection of it) on the test server."""
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    return PostgresKVStore(
        table_name=table,
        connection_string=driver_url(pg_url, "psycopg2"),
        async_connection_string=driver_url(pg_url, "asyncpg"),
    )


def stored_node_ids(vs, scheme: str = "uuid5") -> set:
    """The node ids a SimpleVectorStore's or PGVectorStore's rows hold, each row checked to be
    keyed as ``scheme`` says (``row_id(node id)``; the node id in metadata ``causalrag_node_id``)."""
    from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY, row_id

    if hasattr(vs, "data"):
        rows = {r: vs.data.metadata_dict[r].get(NODE_ID_KEY, r) for r in vs.data.embedding_dict}
    else:
        import sqlalchemy

        engine = sqlalchemy.create_engine(vs.connection_string)
        sql = f"SELECT node_id, metadata_->>'{NODE_ID_KEY}' FROM data_{vs.table_name}"
        with engine.connect() as conn:
            rows = {r: n if n is not None else r for r, n in conn.execute(sqlalchemy.text(sql))}
        engine.dispose()
    wrong = [(r, n) for r, n in rows.items() if r != row_id(n, scheme)]
    assert not wrong, f"rows not keyed by {scheme}: {wrong[:3]}"
    return set(rows.values())


def standards_case():
    """``(index class, documents, build kwargs, embed model factory, queries)`` of the standards
    store tests, for tests that run every index on one store."""
    from fakes import HashEmbedding
    from llama_index_ext_causalrag import StandardsIndex
    from test_standards_store import QUERIES, docs, parser

    return StandardsIndex, docs(), dict(parser=parser()), HashEmbedding, QUERIES


def causal_case():
    """The same for the CausalGraphIndex store tests (offline extractor, summaries and judge)."""
    from llama_index_ext_causalrag import CausalGraphIndex
    from llama_index_ext_causalrag.causal_graph import ExtractiveSummarizer, OfflineEntityExtractor, OfflineGateJudge
    from test_causal_graph_store import DIM, QUERIES, make_docs

    kw = dict(
        extractor=OfflineEntityExtractor(),
        summarizer=ExtractiveSummarizer(),
        gate_judge=OfflineGateJudge(),
        show_progress=False,
        chunk_size=24,
        max_cluster_size=3,
        min_entity_units=1,
    )
    return CausalGraphIndex, make_docs(), kw, lambda: RandomEmbedding(dim=DIM), QUERIES
