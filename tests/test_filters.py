"""Metadata filters (LlamaIndex's MetadataFilters): the same answer in memory and in PostgreSQL,
inside each list before its top-k, kept by promotion; bad filters refused by key."""

import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.storage.filters import check_filters, matches
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_multigranularity_store import DIM, GS, QUERIES, TOPICS

F, Op = MetadataFilter, FilterOperator


def docs():
    return [
        Document(
            text=" ".join(
                f"Sentence {i} of study {d} reports {TOPICS[(d + i) % 5]} result r{d}x{i}." for i in range(14)
            ),
            id_=f"doc{d}",
            metadata={"tenant": "a" if d % 2 else "b", "year": 2020 + d, "tags": ["x", f"t{d}"]},
        )
        for d in range(6)
    ]


CASES = [
    MetadataFilters(filters=[F(key="tenant", value="a")]),
    MetadataFilters(filters=[F(key="year", value=2022, operator=Op.GTE), F(key="year", value=2024, operator=Op.LT)]),
    MetadataFilters(
        filters=[F(key="tenant", value="a"), F(key="year", value=2020, operator=Op.EQ)], condition=FilterCondition.OR
    ),
    MetadataFilters(filters=[F(key="year", value=[2021, 2025], operator=Op.IN)]),
    MetadataFilters(filters=[F(key="tags", value="t3", operator=Op.CONTAINS)]),
    MetadataFilters(
        filters=[
            F(key="tenant", value="b", operator=Op.NE),
            MetadataFilters(
                filters=[F(key="year", value=2021), F(key="year", value=2023)], condition=FilterCondition.OR
            ),
        ]
    ),
]


def test_matches_follows_the_operators():
    meta = {"tenant": "a", "year": 2021, "tags": ["x", "t1"], "name": "Alpha Beta"}
    assert matches(meta, MetadataFilters(filters=[F(key="year", value=2021.0)]))
    assert not matches(meta, MetadataFilters(filters=[F(key="year", value="2021")]))  # a string is not a number
    assert matches(meta, MetadataFilters(filters=[F(key="missing", value="z", operator=Op.NE)]))
    assert not matches(meta, MetadataFilters(filters=[F(key="missing", value="z")]))
    assert matches(meta, MetadataFilters(filters=[F(key="tags", value=["t1", "x"], operator=Op.ALL)]))
    assert not matches(meta, MetadataFilters(filters=[F(key="tags", value=["t1", "q"], operator=Op.ALL)]))
    assert matches(meta, MetadataFilters(filters=[F(key="name", value="alpha%", operator=Op.TEXT_MATCH_INSENSITIVE)]))
    assert not matches(meta, MetadataFilters(filters=[F(key="name", value="alpha%", operator=Op.TEXT_MATCH)]))
    assert matches(meta, MetadataFilters(filters=[F(key="year", value=2021)], condition=FilterCondition.NOT)) is False


def test_bad_filters_name_the_key():
    with pytest.raises(ValueError, match="'year'.*non-empty list"):
        check_filters(MetadataFilters(filters=[F(key="year", value=2021, operator=Op.IN)]))
    with pytest.raises(ValueError, match="'tenant'.*use 'in' for a list"):
        check_filters(MetadataFilters(filters=[F(key="tenant", value=["a", "b"])]))
    with pytest.raises(TypeError, match="MetadataFilters"):
        check_filters({"tenant": "a"})
    index = MultiGranularityIndex.from_documents(docs()[:2], granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    with pytest.raises(ValueError, match="'tenant'"):
        index.as_retriever(filters=MetadataFilters(filters=[F(key="tenant", value=["a"])]))


@pytest.fixture(scope="module")
def memory():
    return MultiGranularityIndex.from_documents(docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))


def check_filtered(index, filters):
    """Every returned node passes, and the filtered lists are full: as many candidates as the units that pass."""
    for q in QUERIES[:6]:
        got = index.as_retriever(similarity_top_k=10, filters=filters, budget_tokens=256).retrieve(q)
        assert got and all(matches(n.node.metadata, filters) for n in got), q
    return [
        [(n.node.node_id, n.node.text) for n in index.as_retriever(similarity_top_k=10, filters=filters).retrieve(q)]
        for q in QUERIES
    ]


def test_filtered_retrieval_in_memory_keeps_to_the_filter_and_fills_the_lists(memory):
    for filters in CASES:
        check_filtered(memory, filters)
    fusion = memory.as_fusion_retriever(filters=CASES[0], candidates_per_list=5)
    lists = fusion.source.lists(
        __import__("llama_index.core.schema", fromlist=["QueryBundle"]).QueryBundle(QUERIES[0]), 5, CASES[0]
    )
    assert all(len(r.ids) == 5 for key, r in lists.items() if key[0] == "dense")  # filtered before the top-k
    nothing = MetadataFilters(filters=[F(key="no_such_key", value="x")])
    assert memory.as_retriever(filters=nothing).retrieve(QUERIES[0]) == []


@pytest.mark.postgres
def test_filters_pushed_into_postgres_give_the_in_memory_answers(memory, pg_url, pg_table):
    ctx = StorageContext.from_defaults(
        vector_store=pg_vector_store(pg_url, pg_table, DIM), docstore=pg_docstore(pg_url, pg_table + "_docs")
    )
    served = MultiGranularityIndex.from_documents(
        docs(),
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=ctx,
        kvstore=pg_kvstore(pg_url, pg_table + "_kv"),
    )
    assert served._backend.layout == "served"
    for filters in CASES:
        assert check_filtered(served, filters) == check_filtered(memory, filters)
    nothing = MetadataFilters(filters=[F(key="no_such_key", value="x")])
    assert served.as_retriever(filters=nothing).retrieve(QUERIES[0]) == []


def test_standards_and_causal_graph_retrievers_keep_to_the_filter():
    from fakes import HashEmbedding
    from llama_index_ext_causalrag import CausalGraphIndex, StandardsIndex
    from test_causal_graph_store import build as build_graph
    from test_causal_graph_store import make_docs as graph_docs
    from test_standards_store import docs as standard_docs
    from test_standards_store import parser

    standards = StandardsIndex.from_documents(
        [
            Document(text=d.text, id_=d.doc_id, metadata={"body": "etsi" if d.doc_id.startswith("en") else "ietf"})
            for d in standard_docs()
        ],
        parser=parser(),
        embed_model=HashEmbedding(),
    )
    only = MetadataFilters(filters=[F(key="body", value="etsi")])
    got = standards.as_retriever(filters=only).retrieve("acknowledge packets loss recovery")
    assert got and all(n.node.metadata["body"] == "etsi" for n in got)
    assert any(n.node.metadata["body"] == "ietf" for n in standards.as_retriever().retrieve("acknowledge packets"))
    assert standards.as_retriever(filters=MetadataFilters(filters=[F(key="nope", value=1)])).retrieve("packets") == []

    docs = graph_docs()
    tagged = [Document(text=d.text, id_=d.doc_id, metadata={"part": i % 2}) for i, d in enumerate(docs)]
    graph = build_graph(tagged)
    assert isinstance(graph, CausalGraphIndex)
    one = MetadataFilters(filters=[F(key="part", value=1)])
    for preset in ("ppr", "causalrag2"):
        free = graph.as_retriever(preset=preset).retrieve("drought harvest prices")
        kept = graph.as_retriever(preset=preset, filters=one).retrieve("drought harvest prices")
        assert {n.node.metadata.get("part") for n in free} == {0, 1}, preset
        assert kept and all(n.node.metadata.get("part") == 1 for n in kept), preset
