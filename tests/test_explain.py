"""explain(): the nodes retrieve returns, the stages that made them, a JSON-safe dict, events."""

from __future__ import annotations

import json
import re
from typing import Any, List

import pytest
from llama_index.core import Document
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from _causal_graph_helpers import HashEmbedding as CGHash
from _causal_graph_helpers import corpus
from fakes import HashEmbedding
from llama_index_ext_causalrag import CausalGraphIndex, HypothesisRetriever, MultiGranularityIndex, StandardsIndex
from llama_index_ext_causalrag.explain import Explanation, RetrievalStageEvent
from llama_index_ext_causalrag.explain.explanation import json_safe
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

TOPICS = ["drought", "insulin", "coral", "wheat"]
OPTIONS = {"A": "drought", "B": "coral"}


def _docs(n_sent: int = 20) -> List[Document]:  # shorter than the 32-sentence parents: promoted
    return [
        Document(
            text=" ".join(
                f"Sentence {i} of the {t} study reports result r{k}x{i} about {t} and cause c{i % 7}."
                for i in range(n_sent)
            ),
            id_=f"doc-{t}",
        )
        for k, t in enumerate(TOPICS)
    ]


@pytest.fixture(scope="module")
def retrievers():
    umg = MultiGranularityIndex.from_documents(_docs(), embed_model=HashEmbedding())
    std = StandardsIndex.from_documents(
        [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")],
        embed_model=HashEmbedding(),
    )
    cg = CausalGraphIndex.from_documents(corpus(2), embed_model=CGHash(), show_progress=False, max_cluster_size=3)
    return {
        "umgp": (umg.as_retriever(budget_tokens=60), "drought study result cause c3"),
        "standards": (std.as_retriever(), "How is the retransmission timer computed after a loss?"),
        "causalrag2": (cg.as_retriever(preset="causalrag2", similarity_top_k=4), "What does drought stress lead to?"),
        "causalrag2_ppr": (cg.as_retriever(similarity_top_k=4), "What does drought stress lead to?"),  # the default
        "hcqr": (
            HypothesisRetriever.from_defaults(umg.as_retriever(preset="umg", similarity_top_k=10), budget_tokens=200),
            "Which study reports result r2x3? A. drought B. coral",
        ),
    }


METHOD_OF = {"causalrag2_ppr": "causalrag2"}  # the method an explanation names, where not the key
STAGES = {
    "umgp": ["candidate_lists", "entropy_fusion", "parent_promotion", "final_cut"],
    "standards": ["bm25_prefilter", "dense_rerank", "rrf_fusion", "graph_expansion", "graph_rerank"],
    "causalrag2": ["seeding", "gated_expansion", "unit_ranking", "causal_filter", "final_cut"],
    "causalrag2_ppr": ["propagation"],
    "hcqr": ["queries", "hypothesis_fusion"],
}


def _same(a, b) -> None:
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
    assert [n.score for n in a] == [n.score for n in b]
    assert [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in a] == [
        n.node.get_content(metadata_mode=MetadataMode.NONE) for n in b
    ]


@pytest.mark.parametrize("method", list(STAGES))
def test_explain_returns_what_retrieve_returns_with_its_stages(retrievers, method):
    r, q = retrievers[method]
    e = r.explain(q)
    assert isinstance(e, Explanation) and e.method == METHOD_OF.get(method, method) and e.query == q
    assert e.nodes
    _same(e.nodes, r.retrieve(q))
    assert [s["name"] for s in e.stages] == STAGES[method]


@pytest.mark.parametrize("method", list(STAGES))
def test_to_dict_is_json_safe_and_round_trips(retrievers, method, tmp_path):
    r, q = retrievers[method]
    e = r.explain(q)
    d = e.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert set(d) == {"method", "query", "options", "nodes", "stages", "graph"}
    assert [n["id"] for n in d["nodes"]] == [n.node.node_id for n in e.nodes]
    assert all("causalrag_provenance" in n["metadata"] for n in d["nodes"])
    assert all(set(s) == {"name", "took", "decided", "why"} and s["why"] for s in d["stages"])
    page = e.to_html(tmp_path / "why.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and all(s["name"] in page for s in d["stages"])


def test_umgp_stages_hold_the_real_numbers(retrievers):
    r, q = retrievers["umgp"]
    e = r.explain(q)
    lists = e.stage("candidate_lists")["decided"]["lists"]
    assert len(lists) == len(r.retriever.experts)
    assert sum(x["weight"] for x in lists) == pytest.approx(1.0)
    top = e.stage("entropy_fusion")["decided"]["ranking"]
    assert [x["R"] for x in top] == sorted((x["R"] for x in top), reverse=True)
    promo = e.stage("parent_promotion")["decided"]
    assert promo["promotions"] and promo["tokens_used"] <= 60
    assert e.stage("final_cut")["decided"]["kept"] == [n.node.node_id for n in e.nodes]


def test_causalrag2_graph_and_filter_verdicts(retrievers):
    r, q = retrievers["causalrag2"]
    e = r.explain(q)
    g = e.to_dict()["graph"]
    ids = {n["id"] for n in g["nodes"]}
    assert any(n["kind"].startswith("seed") for n in g["nodes"])
    assert all(x["source"] in ids and x["target"] in ids for x in g["edges"])
    assert all(isinstance(x["crossed"], bool) for x in g["edges"])
    verdicts = e.stage("causal_filter")["decided"]["verdicts"]
    assert sum(v["kept"] for v in verdicts) >= len(e.nodes) and all(v["reason"] for v in verdicts)


def test_standards_sections_and_hcqr_queries(retrievers):
    r, q = retrievers["standards"]
    e = r.explain(q)
    rows = e.stage("graph_rerank")["decided"]["returned"]
    assert [x["id"] for x in rows] == [n.node.node_id for n in e.nodes] and all("section_path" in x for x in rows)
    # the page's graph: the seeds and the sections the expansion reached, with the edges it followed
    graph = e.to_dict()["graph"]
    seeds = e.stage("graph_expansion")["took"]["seeds"]
    followed = e.stage("graph_expansion")["decided"]["followed"]
    ids = {x["id"] for x in graph["nodes"]}
    assert set(seeds) <= ids and followed and len(graph["edges"]) == len(followed)
    assert all(x["source"] in ids and x["target"] in ids for x in graph["edges"])
    assert [x["crossed"] for x in graph["edges"]] == [f["relation"] in ("cites", "cited_by") for f in followed]
    assert any(x["label"] != x["id"] for x in graph["nodes"])  # labelled with section paths
    h, hq = retrievers["hcqr"]
    e = h.explain(hq, options=OPTIONS)
    _same(e.nodes, h.retrieve_with_plan(hq, OPTIONS)[0])
    queries = e.stage("queries")["decided"]["queries"]
    assert [x["role"] for x in queries] == list(h.use_queries) and all(x["query"] for x in queries)
    found = {n for x in queries for n in x["found"]}
    assert {n.node.node_id for n in e.nodes} <= found
    assert e.options["options"] == OPTIONS


class _Collect(BaseEventHandler):
    events: List[Any] = []

    @classmethod
    def class_name(cls) -> str:
        return "_Collect"

    def handle(self, event, **kwargs) -> None:
        if isinstance(event, RetrievalStageEvent):
            self.events.append(event)


@pytest.mark.parametrize("method", list(STAGES))
def test_each_stage_emits_an_instrumentation_event(retrievers, method):
    r, q = retrievers[method]
    root = get_dispatcher()
    handler = _Collect(events=[])
    root.add_event_handler(handler)
    try:
        r.retrieve(q)  # plain retrieve: events without explain
    finally:
        root.event_handlers.remove(handler)
    mine = [ev for ev in handler.events if ev.method == METHOD_OF.get(method, method)]
    assert [ev.stage for ev in mine][-len(STAGES[method]) :] == STAGES[method]
    assert all(
        ev.span_id and ev.numbers and all(isinstance(v, (int, float)) for v in ev.numbers.values()) for ev in mine
    )


def test_no_event_is_built_without_a_handler(retrievers, monkeypatch):
    built = []
    monkeypatch.setattr(RetrievalStageEvent, "__init__", lambda self, **kw: built.append(kw))
    r, q = retrievers["umgp"]
    r.retrieve(q)
    assert built == []


@pytest.mark.parametrize("method", list(STAGES))
def test_bad_input_gives_the_errors_of_retrieve(retrievers, method):
    r, _ = retrievers[method]
    for query in ("", "   "):
        with pytest.raises(ValueError) as plain:
            r.retrieve(query)
        with pytest.raises(ValueError) as explained:
            r.explain(query)
        assert str(explained.value) == str(plain.value)
    with pytest.raises(TypeError, match="takes no options" if method != "hcqr" else "unexpected keyword"):
        r.explain("x", nope=1)


class _Nothing(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return []


def test_an_empty_index_or_source_explains_as_it_retrieves():
    for cls in (MultiGranularityIndex, StandardsIndex):  # no empty index: the same error before any retriever
        with pytest.raises(ValueError, match="pass"):
            cls.from_documents([], embed_model=HashEmbedding())
    promoted = MultiGranularityIndex.from_documents(_docs(4), embed_model=HashEmbedding()).as_postprocessor()
    for r in (
        HypothesisRetriever(_Nothing(), options=OPTIONS),
        PostprocessedRetriever(_Nothing(), [promoted], budget_tokens=50),
    ):
        assert r.retrieve("drought cause") == []
        e = r.explain("drought cause")
        assert e.nodes == [] and json.loads(json.dumps(e.to_dict())) == e.to_dict()
        try:  # HCQR refuses an empty query, a pipeline over a source that returns nothing does not
            expected = r.retrieve(" ")
        except ValueError as err:
            with pytest.raises(ValueError, match=re.escape(str(err))):
                r.explain(" ")
        else:
            assert r.explain(" ").nodes == expected


def test_json_safe_turns_numpy_tuples_and_nan_into_json():
    import numpy as np

    value = {"a": np.float32(0.5), "b": (1, np.int64(2)), 3: {np.nan, 1.0}, "c": np.arange(2), "d": float("inf")}
    assert json_safe(value) == {"a": 0.5, "b": [1, 2], "3": [1.0, None], "c": [0, 1], "d": None}
