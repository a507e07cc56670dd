"""LLM calls inside retrieval only when asked, and never blocking the event loop.

``Settings.llm`` (set for answers) adds no LLM call to the causal filter or the HCQR planner;
``llm=`` (or ``llm="settings"``) does. ``aretrieve`` awaits the LLM: a ticking coroutine keeps
running while a call is in flight (ticks counted by the fake LLM, no wall-clock thresholds).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Dict, List

import pytest
from llama_index.core import Settings
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CompletionResponse
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import Document

from fakes import AsyncScriptedLLM, HashEmbedding, ScriptedLLM
from llama_index_ext_causalrag import DenseExpert, HypothesisRetriever
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.causal_filter import OFFLINE_ALTERNATIVE, CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from llama_index_ext_causalrag.text.provenance import get_provenance

TEXTS = {
    "agri": "Drought stress reduces crop yield. Crop yield depends on soil moisture. Irrigation increases "
    "soil moisture. Heat waves cause drought stress in maize.",
    "farm": "Maize farmers use irrigation. Fertilizer prices lead to lower farm income. Farm income drives "
    "rural investment.",
}
QUESTION = "What causes bitter pit in apples?\nA. codling moth\nB. low soil pH"
PLANNER_OFFLINE = "retrieval-based hypothesis planner"
PLAN = json.dumps(
    {
        "working_answer": "B",
        "discriminating_features": ["calcium"],
        "confirming_evidence": [],
        "rationale": "",
        "queries": {
            "support": "soil pH calcium bitter pit",
            "distinguish": "codling moth versus calcium",
            "key_features": "bitter pit",
        },
    }
)


def _keep_first(prompt: str, i: int) -> str:
    return '{"keep": ["n1"]}' if "keep" in prompt else PLAN


@pytest.fixture(scope="module")
def graph() -> GatedExpansionRetriever:
    docs = [Document(text=t, doc_id=k) for k, t in TEXTS.items()]
    index = CausalGraphIndex.from_documents(
        docs, embed_model=HashEmbedding(), show_progress=False, chunk_size=24, min_entity_units=1
    )
    return GatedExpansionRetriever(index, similarity_top_k=6, embed_model=HashEmbedding(), min_gain=0.0)


@pytest.fixture
def base() -> DenseExpert:
    docs = [
        Document(id_="e1", text="Low soil pH locks up calcium and causes bitter pit in apples."),
        Document(id_="e2", text="Codling moth larvae tunnel into the core of the fruit."),
    ]
    nodes = SentenceSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(docs)
    return DenseExpert(nodes, embed_model=HashEmbedding(), similarity_top_k=5)


@pytest.fixture
def settings_llm(monkeypatch) -> ScriptedLLM:
    """``Settings.llm``: a scripted LLM whose calls are counted (``len(llm.prompts)``)."""
    llm = ScriptedLLM(_keep_first)
    monkeypatch.setattr(Settings, "_llm", llm)
    return llm


# ------------------------------------------------------------ Settings.llm is not used
def test_the_causal_filter_pipeline_ignores_settings_llm(graph, settings_llm, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        pipeline = PostprocessedRetriever(graph, [CausalFilterPostprocessor()], top_n=4)
        nodes = pipeline.retrieve("Why did crop yield fall?")
    assert nodes and settings_llm.prompts == []
    assert {get_provenance(n)["filter"]["mode"] for n in nodes} == {"offline"}
    assert OFFLINE_ALTERNATIVE in caplog.text and "llm='settings'" in caplog.text


def test_the_causal_filter_calls_the_llm_it_is_given(graph, settings_llm) -> None:
    given = ScriptedLLM(_keep_first)
    nodes = PostprocessedRetriever(graph, [CausalFilterPostprocessor(llm=given)]).retrieve("Why did crop yield fall?")
    assert len(given.prompts) == 1 and settings_llm.prompts == []
    assert {get_provenance(n)["filter"]["mode"] for n in nodes} == {"llm"}
    CausalFilterPostprocessor(llm="settings").postprocess_nodes(graph.retrieve("crop yield"), query_str="q")
    assert len(settings_llm.prompts) == 1


def test_hcqr_from_defaults_ignores_settings_llm(base, settings_llm, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        nodes, plan = HypothesisRetriever.from_defaults(base).retrieve_with_plan(QUESTION)
    assert nodes and settings_llm.prompts == []
    assert plan.metadata["planner"] != "llm"
    assert PLANNER_OFFLINE in caplog.text


def test_hcqr_calls_the_llm_it_is_given_or_settings_when_asked(base, settings_llm) -> None:
    given = ScriptedLLM(_keep_first)
    _, plan = HypothesisRetriever.from_defaults(base, llm=given).retrieve_with_plan(QUESTION)
    assert len(given.prompts) == 1 and plan.metadata["planner"] == "llm" and settings_llm.prompts == []
    _, plan = HypothesisRetriever.from_defaults(base, llm="settings").retrieve_with_plan(QUESTION)
    assert len(settings_llm.prompts) == 1 and plan.metadata["planner"] == "llm"


def test_an_unknown_llm_string_is_refused(base) -> None:
    with pytest.raises(ValueError, match="'setings'"):
        CausalFilterPostprocessor(llm="setings")
    with pytest.raises(ValueError, match="'openai'"):
        HypothesisRetriever.from_defaults(base, llm="openai")


# ---------------------------------------------------------- async never blocks the loop
class TickingLLM(AsyncScriptedLLM):
    """``acomplete`` awaits ``delay`` seconds and records how far the ticker moved meanwhile;
    a synchronous ``complete`` inside the loop is a failure."""

    _ticks: Dict[str, int] = PrivateAttr(default_factory=dict)
    _moved: List[int] = PrivateAttr(default_factory=list)

    def __init__(self, script: Any, ticks: Dict[str, int], **kwargs: Any) -> None:
        super().__init__(script, delay=0.05, **kwargs)
        self._ticks, self._moved = ticks, []

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise AssertionError("complete() was called: aretrieve must await acomplete()")

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        start = self._ticks["n"]
        out = await super().acomplete(prompt, formatted=formatted, **kwargs)
        self._moved.append(self._ticks["n"] - start)
        return out


async def _beside_a_ticker(ticks: Dict[str, int], coro: Any) -> Any:
    done = False

    async def tick() -> None:
        while not done:
            ticks["n"] += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(tick())
    try:
        return await coro
    finally:
        done = True
        await task


def test_the_causal_filter_pipeline_aretrieve_awaits_the_llm(graph) -> None:
    ticks = {"n": 0}
    llm = TickingLLM(_keep_first, ticks)
    pipeline = PostprocessedRetriever(graph, [CausalFilterPostprocessor(llm=llm)], top_n=4)
    nodes = asyncio.run(_beside_a_ticker(ticks, pipeline.aretrieve("Why did crop yield fall?")))
    assert {get_provenance(n)["filter"]["mode"] for n in nodes} == {"llm"}
    assert len(llm._moved) == 1 and llm._moved[0] > 0


def test_hcqr_aretrieve_awaits_the_llm(base) -> None:
    ticks = {"n": 0}
    llm = TickingLLM(_keep_first, ticks)
    hcqr = HypothesisRetriever.from_defaults(base, llm=llm)
    nodes, plan = asyncio.run(_beside_a_ticker(ticks, hcqr.aretrieve_with_plan(QUESTION)))
    assert nodes and plan.metadata["planner"] == "llm"
    assert len(llm._moved) == 1 and llm._moved[0] > 0
