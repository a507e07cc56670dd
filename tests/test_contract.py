"""One facade contract (llama_index_ext_causalrag/contract.py), held by one test run over every facade."""

from __future__ import annotations

import inspect

import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.base.response.schema import StreamingResponse
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.vector_stores import SimpleVectorStore

from fakes import HashEmbedding
from llama_index_ext_causalrag import (
    CausalGraphIndex,
    DenseExpert,
    HypothesisRetriever,
    MultiGranularityIndex,
    StandardsIndex,
)
from llama_index_ext_causalrag.contract import IndexContract
from llama_index_ext_causalrag.validation import caller
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

TOPICS = ["drought", "insulin", "coral", "wheat"]


def _plain_docs() -> list[Document]:
    return [
        Document(
            id_=f"doc-{t}",
            text=" ".join(f"Sentence {i} of the {t} study reports that {t} causes effect e{i % 5}." for i in range(12)),
        )
        for t in TOPICS
    ]


def _standards_docs() -> list[Document]:
    return [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]


FACADES = {
    "MultiGranularityIndex": (MultiGranularityIndex, _plain_docs, "drought study effect"),
    "StandardsIndex": (StandardsIndex, _standards_docs, "When is a frame a PROTOCOL_VIOLATION?"),
    "CausalGraphIndex": (CausalGraphIndex, _plain_docs, "what does drought cause"),
}


@pytest.fixture(scope="module", params=sorted(FACADES))
def facade(request):
    cls, docs, query = FACADES[request.param]
    index = cls.from_documents(docs(), embed_model=HashEmbedding(), show_progress=False)
    return cls, index, docs, query


def test_every_facade_derives_from_the_contract(facade):
    cls, index, _, _ = facade
    assert isinstance(index, IndexContract)


def test_from_documents_takes_keywords_only_after_the_documents(facade):
    cls, _, docs, _ = facade
    params = list(inspect.signature(cls.from_documents).parameters.values())
    assert params[0].name == "documents"
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[1:]), [p.name for p in params[1:]]
    assert inspect.signature(cls.from_documents).parameters["storage_context"].annotation in (
        "Optional[StorageContext]",
        StorageContext,
        "StorageContext | None",
    )
    with pytest.raises(TypeError):
        cls.from_documents(docs(), HashEmbedding())


def test_vector_store_keyword_is_refused_with_the_storage_context_to_use(facade):
    cls, _, docs, _ = facade
    with pytest.raises(TypeError, match=r"storage_context=StorageContext\.from_defaults\(vector_store="):
        cls.from_documents(docs(), vector_store=SimpleVectorStore(), embed_model=HashEmbedding())


def test_as_retriever_takes_keywords_only_and_refuses_a_misspelt_one(facade):
    _, index, _, query = facade
    assert index.as_retriever(similarity_top_k=3).retrieve(query)
    with pytest.raises(TypeError):
        index.as_retriever(3)
    with pytest.raises(TypeError, match="similarity_topk"):
        index.as_retriever(similarity_topk=3)


def test_query_engine_streams_with_an_llm(facade):
    _, index, _, query = facade
    response = index.as_query_engine(llm=MockLLM(), streaming=True).query(query)
    assert isinstance(response, StreamingResponse)
    assert response.source_nodes
    assert "".join(response.response_gen)  # MockLLM echoes the prompt


def test_query_engine_takes_llama_index_response_modes(facade):
    _, index, _, query = facade
    response = index.as_query_engine(llm=MockLLM(), response_mode="tree_summarize").query(query)
    assert response.source_nodes and str(response)


def test_query_engine_forwards_retriever_and_engine_options_and_refuses_others(facade):
    _, index, _, query = facade
    every = index.as_query_engine(llm=MockLLM(), similarity_top_k=2).query(query).source_nodes
    assert 0 < len(every) <= 2
    # a node postprocessor of LlamaIndex's runs in the engine: a cutoff above every score drops all
    none = (
        index.as_query_engine(llm=MockLLM(), node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=1e9)])
        .query(query)
        .source_nodes
    )
    assert none == []
    with pytest.raises(TypeError, match="respons_mode"):
        index.as_query_engine(llm=MockLLM(), respons_mode="compact")


def test_update_verbs_have_llama_index_signatures():
    for cls in (MultiGranularityIndex, StandardsIndex, CausalGraphIndex):
        sig = inspect.signature(cls.delete_ref_doc).parameters
        assert list(sig)[:3] == ["self", "ref_doc_id", "delete_from_docstore"], cls
        assert sig["delete_from_docstore"].default is False
        assert list(inspect.signature(cls.insert).parameters)[:2] == ["self", "document"], cls
        assert list(inspect.signature(cls.refresh_ref_docs).parameters)[:2] == ["self", "documents"], cls


def test_insert_delete_refresh_follow_llama_index(facade):
    cls, _, docs, query = facade
    index = cls.from_documents(docs()[:-1], embed_model=HashEmbedding(), show_progress=False)
    last = docs()[-1]
    index.insert(last)
    assert index.refresh_ref_docs([last]) == [False]  # unchanged: nothing to do
    index.delete_ref_doc(last.id_, delete_from_docstore=True)
    got = {n.node.ref_doc_id for n in index.as_retriever(similarity_top_k=50).retrieve(query)}
    assert last.id_ not in got
    with pytest.raises(TypeError, match="bogus"):
        index.delete_ref_doc(docs()[0].id_, bogus=1)


def test_hypothesis_retriever_has_the_same_verbs_where_it_owns_nothing():
    from llama_index.core.node_parser import SentenceSplitter

    nodes = SentenceSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(_plain_docs())
    base = DenseExpert(nodes, embed_model=HashEmbedding(), similarity_top_k=5)
    hcqr = HypothesisRetriever.from_defaults(base, budget_tokens=256)
    response = hcqr.as_query_engine(llm=MockLLM(), streaming=True).query("what does drought cause")
    assert isinstance(response, StreamingResponse) and response.source_nodes
    with pytest.raises(TypeError, match="streamin"):
        hcqr.as_query_engine(llm=MockLLM(), streamin=True)


def test_chat_engine_is_a_contract_verb_with_llama_index_defaults(facade):
    from llama_index.core.chat_engine import CondensePlusContextChatEngine

    _, index, _, query = facade
    sig = inspect.signature(type(index).as_chat_engine).parameters
    assert list(sig)[:3] == ["self", "chat_mode", "llm"] and sig["chat_mode"].default == "best"
    engine = index.as_chat_engine(llm=MockLLM(max_tokens=16), similarity_top_k=2)
    assert isinstance(engine, CondensePlusContextChatEngine)  # "best", as LlamaIndex's BaseIndex makes it
    assert 0 < len(engine.chat(query).source_nodes) <= 2
    with pytest.raises(TypeError, match="similarity_topk"):
        index.as_chat_engine(llm=MockLLM(), similarity_topk=2)


def test_errors_name_the_public_call_without_it_being_passed_down(facade):
    cls, index, docs, _ = facade
    name = cls.__name__
    with pytest.raises(TypeError, match=rf"^{name}\.delete_ref_doc\(\) got an unexpected keyword argument 'bogus'"):
        index.delete_ref_doc(docs()[0].id_, bogus=1)
    with pytest.raises(
        TypeError, match=rf"^{name}\.as_query_engine\(\) got an unexpected keyword argument 'respons_mode"
    ):
        index.as_query_engine(llm=MockLLM(), respons_mode="compact")
    with pytest.raises(ValueError, match=rf"^{name}\.refresh_ref_docs documents must be a list of Document"):
        index.refresh_ref_docs("just one string")
    with pytest.raises(TypeError, match=rf"^{name}\.as_chat_engine\(chat_mode='context'\) got an unexpected keyword"):
        index.as_chat_engine(chat_mode="context", llm=MockLLM(), bogus=1)
    assert caller() == "this call"  # the name does not outlive the call that raised
