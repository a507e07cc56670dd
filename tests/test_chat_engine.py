"""as_chat_engine on every facade: LlamaIndex's chat engines over our retrievers (chat_engine.py)."""

from __future__ import annotations

import logging

import pytest
from llama_index.core import Document, Settings
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    CondenseQuestionChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.chat_engine.types import ChatMode
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.postprocessor import SimilarityPostprocessor

from fakes import HashEmbedding, ScriptedLLM
from llama_index_ext_causalrag import CausalGraphIndex, MultiGranularityIndex, StandardsIndex
from llama_index_ext_causalrag.text.provenance import get_provenance
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

CONDENSE = "be a standalone question"  # LlamaIndex's condense prompts say so
TOPICS = ["drought", "insulin", "coral", "wheat"]


def _plain() -> list[Document]:
    return [
        Document(
            id_=f"doc-{t}",
            text=" ".join(f"Sentence {i} of the {t} study reports that {t} causes effect e{i % 5}." for i in range(12)),
        )
        for t in TOPICS
    ]


def _standards() -> list[Document]:
    return [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")]


FACADES = {
    "MultiGranularityIndex": (MultiGranularityIndex, _plain, "drought study effect", "drought"),
    "StandardsIndex": (StandardsIndex, _standards, "When is a frame a PROTOCOL_VIOLATION?", "PROTOCOL_VIOLATION"),
    "CausalGraphIndex": (CausalGraphIndex, _plain, "what does drought cause", "drought"),
}


@pytest.fixture(scope="module", params=sorted(FACADES))
def facade(request):
    cls, docs, query, word = FACADES[request.param]
    return cls.from_documents(docs(), embed_model=HashEmbedding()), query, word


def _llm() -> ScriptedLLM:
    """Condense prompts get a standalone question back, everything else a short reply."""

    def script(prompt: str, i: int) -> str:
        return "What else does drought cause?" if CONDENSE in prompt.lower() else f"reply {i}"

    return ScriptedLLM(script)


@pytest.mark.parametrize(
    "mode, cls",
    [
        ("context", ContextChatEngine),
        ("condense_plus_context", CondensePlusContextChatEngine),
        ("condense_question", CondenseQuestionChatEngine),
        ("best", CondensePlusContextChatEngine),
        (ChatMode.CONTEXT, ContextChatEngine),
    ],
)
def test_retrieving_modes_answer_from_the_index(facade, mode, cls):
    index, query, word = facade
    llm = _llm()
    engine = index.as_chat_engine(chat_mode=mode, llm=llm)
    assert isinstance(engine, cls)
    first = engine.chat(query)
    assert first.source_nodes and str(first).startswith("reply")
    assert any(word in p for p in llm.prompts)  # the retrieved text reached the LLM
    second = engine.chat("and what else?")  # the history is kept: a condensing mode condenses it
    assert str(second).startswith("reply")
    if mode in ("condense_question", "condense_plus_context", "best"):
        assert any(CONDENSE in p.lower() for p in llm.prompts)


def test_simple_mode_is_the_llm_alone(facade):
    index, _, _ = facade
    llm = _llm()
    engine = index.as_chat_engine(chat_mode="simple", llm=llm, system_prompt="Be brief.")
    assert isinstance(engine, SimpleChatEngine)
    assert str(engine.chat("hello")).startswith("reply") and "Be brief." in llm.prompts[-1]
    with pytest.raises(TypeError, match="similarity_top_k"):  # nothing is retrieved in this mode
        index.as_chat_engine(chat_mode="simple", llm=llm, similarity_top_k=2)


def test_options_go_to_the_retriever_and_the_chat_engine(facade):
    index, query, _ = facade
    memory = ChatMemoryBuffer.from_defaults(chat_history=[ChatMessage(role="user", content="earlier turn")])
    engine = index.as_chat_engine(
        chat_mode="context", llm=_llm(), similarity_top_k=1, memory=memory, system_prompt="You answer from the context."
    )
    response = engine.chat(query)
    assert len(response.source_nodes) == 1
    assert engine.chat_history[0].content == "earlier turn"
    cut_all = index.as_chat_engine(
        chat_mode="condense_plus_context",
        llm=_llm(),
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=1e9)],
    )
    assert cut_all.chat(query).source_nodes == []
    # condense_question: the query engine's options go to as_query_engine
    cq = index.as_chat_engine(
        chat_mode="condense_question", llm=_llm(), response_mode="tree_summarize", similarity_top_k=2
    )
    assert 0 < len(cq.chat(query).source_nodes) <= 2


def test_unknown_options_and_modes_are_refused_by_name(facade):
    index, _, _ = facade
    with pytest.raises(TypeError, match="system_promt.*did you mean 'system_prompt'"):
        index.as_chat_engine(chat_mode="context", llm=_llm(), system_promt="x")
    with pytest.raises(TypeError, match="response_mode"):  # a query-engine option without a query engine
        index.as_chat_engine(chat_mode="context", llm=_llm(), response_mode="compact")
    with pytest.raises(ValueError, match="chat_mode must be one of .*'condense_question'"):
        index.as_chat_engine(chat_mode="condense", llm=_llm())
    with pytest.raises(ValueError, match="QueryEngineTool"):
        index.as_chat_engine(chat_mode="react", llm=_llm())


def test_no_llm_is_an_error_naming_the_fix_never_openai(facade, monkeypatch):
    index, _, _ = facade
    monkeypatch.setattr(Settings, "_llm", None)
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with pytest.raises(ValueError, match=r"needs an LLM .*pass llm=\.\.\. or set Settings\.llm"):
        index.as_chat_engine()
    with pytest.raises(ValueError, match="as_query_engine"):
        index.as_chat_engine(chat_mode="simple")


def test_settings_llm_is_used_when_none_is_given(facade, monkeypatch):
    index, query, _ = facade
    llm = _llm()
    monkeypatch.setattr(Settings, "_llm", llm)
    assert str(index.as_chat_engine(chat_mode="context").chat(query)).startswith("reply") and llm.prompts


def test_a_budget_reaches_the_chat_retriever():
    index = MultiGranularityIndex.from_documents(_plain(), embed_model=HashEmbedding())
    response = index.as_chat_engine(chat_mode="context", llm=_llm(), budget_tokens=30).chat("drought causes effect e3")
    assert response.source_nodes and all("cut" in get_provenance(n) for n in response.source_nodes)


def test_the_causal_graph_chat_hands_its_llm_to_the_causal_filter(caplog):
    index = CausalGraphIndex.from_documents(_plain(), embed_model=HashEmbedding())
    llm = ScriptedLLM(lambda p, i: "reply")
    with caplog.at_level(logging.WARNING):
        engine = index.as_chat_engine(chat_mode="context", llm=llm, preset="causalrag2")
    assert not any("no LLM given" in r.getMessage() for r in caplog.records)  # the filter has the LLM
    assert engine.chat("what does drought cause").source_nodes is not None
