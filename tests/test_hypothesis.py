"""HCQR: transform (scripted LLM and offline planner), retriever fusion/budget, DUR evaluator."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, List

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import Field
from llama_index.core.evaluation import BaseEvaluator
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.retrievers import TransformRetriever
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from llama_index_ext_causalrag.hypothesis import (
    ALL_ROLES,
    HYPOTHESIS_PRESETS,
    QUERY_ROLES,
    DecisionUsefulnessEvaluator,
    HypothesisQueryBundle,
    HypothesisQueryTransform,
    HypothesisRetriever,
)
from llama_index_ext_causalrag.hypothesis.options import key_terms
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, get_provenance
from llama_index_ext_causalrag.text.tokens import count_tokens


class ScriptedLLM(CustomLLM):
    """Returns canned outputs in order and records every prompt."""

    outputs: List[str] = Field(default_factory=list)
    prompts: List[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        if not self.outputs:
            raise AssertionError("ScriptedLLM ran out of canned outputs")
        return CompletionResponse(text=self.outputs.pop(0))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):  # type: ignore[override]
        raise NotImplementedError


class OverlapRetriever(BaseRetriever):
    """Scores nodes by the number of shared key terms with the query; records queries."""

    def __init__(self, nodes: List[TextNode], top_k: int = 10) -> None:
        self.nodes = nodes
        self.top_k = top_k
        self.queries: List[str] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        self.queries.append(query_bundle.query_str)
        q = set(key_terms(query_bundle.query_str))
        scored = [(len(q & set(key_terms(n.text))), i) for i, n in enumerate(self.nodes)]
        scored = sorted([s for s in scored if s[0] > 0], key=lambda s: (-s[0], s[1]))
        return [NodeWithScore(node=self.nodes[i], score=float(s)) for s, i in scored[: self.top_k]]


class EmptyRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return []


def _node(nid: str, text: str, doc: str = "d", start: int = 0) -> TextNode:
    return TextNode(
        id_=nid,
        text=text,
        start_char_idx=start,
        end_char_idx=start + len(text),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
    )


CORPUS = [
    _node("n_heparin", "heparin acts within minutes and is monitored by aptt anticoagulant", "d1"),
    _node("n_warfarin", "warfarin blocks vitamin k epoxide reductase slow onset anticoagulant", "d2"),
    _node("n_aspirin", "aspirin inhibits platelet cyclooxygenase irreversibly", "d3"),
    _node("n_other", "tropicamide mydriatic eye drops", "d4"),
]
QUESTION = "Which anticoagulant blocks vitamin k epoxide reductase?"
OPTIONS = {"A": "heparin", "B": "warfarin", "C": "aspirin"}


def _good_json(**over: Any) -> str:
    obj = {
        "working_answer": "B",
        "discriminating_features": ["oral vs parenteral"],
        "confirming_evidence": ["vitamin k antagonist"],
        "rationale": "warfarin is the vitamin k antagonist",
        "queries": {
            "support": "warfarin vitamin k epoxide reductase",
            "distinguish": "warfarin versus heparin mechanism",
            "key_features": "anticoagulant vitamin k epoxide reductase",
        },
    }
    obj.update(over)
    return "Here you go:\n```json\n" + json.dumps(obj) + "\n```"


# -- classes and prompts ---------------------------------------------------------------
def test_class_hierarchy_and_prompts() -> None:
    t = HypothesisQueryTransform(llm=ScriptedLLM())
    assert isinstance(t, BaseQueryTransform)
    assert isinstance(HypothesisRetriever(EmptyRetriever(), t), BaseRetriever)
    ev = DecisionUsefulnessEvaluator(llm=ScriptedLLM())
    assert isinstance(ev, BaseEvaluator)
    assert set(t.get_prompts()) == {"hypothesis_prompt"}
    assert set(ev.get_prompts()) == {"judge_prompt"}
    assert "transform:hypothesis_prompt" in HypothesisRetriever(EmptyRetriever(), t).get_prompts()


# -- LLM transform ---------------------------------------------------------------------
def test_llm_transform_three_queries_hypothesis_in_metadata_only() -> None:
    llm = ScriptedLLM(outputs=[_good_json()])
    out = HypothesisQueryTransform(llm=llm).run(QUESTION, metadata={"options": OPTIONS})
    assert isinstance(out, HypothesisQueryBundle)
    assert list(out.queries) == list(QUERY_ROLES)
    assert out.embedding_strs == list(out.queries.values())
    assert out.query_str == QUESTION  # the generator never sees the hypothesis
    hyp = out.metadata["hypothesis"]
    assert hyp["working_option"] == "B" and hyp["working_answer"] == "warfarin"
    assert out.metadata["planner"] == "llm"
    assert "A. heparin" in llm.prompts[0] and QUESTION in llm.prompts[0]


def test_malformed_json_retries_once_then_succeeds() -> None:
    llm = ScriptedLLM(outputs=["not json at all", _good_json()])
    out = HypothesisQueryTransform(llm=llm).run(QUESTION, metadata={"options": OPTIONS})
    assert len(llm.prompts) == 2
    assert "not valid JSON" in llm.prompts[1]
    assert out.metadata["planner"] == "llm"


def test_malformed_json_twice_falls_back_to_offline_planner_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    llm = ScriptedLLM(outputs=["{broken", '{"foo": 1}', "never used"])
    retr = OverlapRetriever(CORPUS)
    with caplog.at_level(logging.WARNING):
        out = HypothesisQueryTransform(llm=llm, retriever=retr).run(QUESTION, metadata={"options": OPTIONS})
    assert len(llm.prompts) == 2  # one call plus exactly one retry
    assert out.metadata["planner"] == "offline"
    assert any("offline retrieval-based planner" in r.getMessage() for r in caplog.records)
    assert out.metadata["hypothesis"]["working_option"] == "B"  # most supported by retrieval


def test_output_cut_by_the_token_limit_keeps_its_complete_fields_without_a_retry() -> None:
    # queries come right after the working answer, so a cut in the rationale loses nothing needed
    full = json.dumps(
        {
            "working_answer": "B",
            "queries": {"support": ["s1", "more"], "distinguish": "d2", "key_features": "k3"},
            "discriminating_features": ["oral"],
            "rationale": "long",
        }
    )
    llm = ScriptedLLM(outputs=["```json\n" + full[: full.index("long") + 2]])
    out = HypothesisQueryTransform(llm=llm).run(QUESTION, metadata={"options": OPTIONS})
    assert len(llm.prompts) == 1 and out.metadata["planner"] == "llm"
    assert out.queries == {"support": "s1 more", "distinguish": "d2", "key_features": "k3"}
    assert out.metadata["hypothesis"]["working_option"] == "B"
    assert out.metadata["hypothesis"]["discriminating_features"] == ["oral"]


@pytest.mark.parametrize(
    "queries, expected_support",
    [
        (["only one query"], "only one query"),
        (["s1", "d2", "k3", "extra4", "extra5"], "s1"),
        ({"support": "s1"}, "s1"),
    ],
)
def test_fewer_or_more_than_three_queries_gives_exactly_three(queries: Any, expected_support: str) -> None:
    llm = ScriptedLLM(outputs=[_good_json(queries=queries)])
    out = HypothesisQueryTransform(llm=llm).run(QUESTION, metadata={"options": OPTIONS})
    assert len(out.queries) == 3 and all(out.queries[r].strip() for r in QUERY_ROLES)
    assert out.queries["support"] == expected_support
    if isinstance(queries, list) and len(queries) > 3:
        assert "extra4" not in " ".join(out.queries.values())
    if len(queries) == 1:
        # filled from the hypothesis: key features are the question's own terms
        assert out.queries["key_features"] == " ".join(key_terms(QUESTION))
        assert "oral vs parenteral" in out.queries["distinguish"]


def test_options_missing_is_an_open_question() -> None:
    llm = ScriptedLLM(outputs=[_good_json(working_answer="warfarin")])
    out = HypothesisQueryTransform(llm=llm).run("What blocks vitamin k epoxide reductase?")
    assert "open question" in llm.prompts[0]
    assert out.metadata["options"] == {}
    assert out.metadata["hypothesis"]["working_option"] is None


def test_inline_options_are_parsed_from_the_question() -> None:
    llm = ScriptedLLM(outputs=[_good_json()])
    out = HypothesisQueryTransform(llm=llm).run(QUESTION + "\nA. heparin\nB. warfarin\nC. aspirin")
    assert out.metadata["options"] == OPTIONS
    assert out.metadata["question"] == QUESTION


def test_bad_options_value_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="options must be a mapping"):
        HypothesisQueryTransform(llm=ScriptedLLM()).run(QUESTION, metadata={"options": 42})


# -- offline planner -------------------------------------------------------------------
def test_offline_planner_is_explicit_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        t = HypothesisQueryTransform(llm=None, retriever=OverlapRetriever(CORPUS))
    assert t.llm is None
    assert any("offline" in r.getMessage() for r in caplog.records)
    out = t.run(QUESTION, metadata={"options": OPTIONS})
    hyp = out.metadata["hypothesis"]
    assert hyp["planner"] == "offline" and hyp["working_option"] == "B"
    assert "warfarin" in out.queries["support"]
    # q2 contrasts y0 with the runner-up option; q3 holds the question's terms, then the options'
    runner = [k for k in OPTIONS if k != "B" and OPTIONS[k] in out.queries["distinguish"]]
    assert len(runner) == 1
    assert out.queries["key_features"].split() == key_terms(QUESTION) + ["heparin", "warfarin", "aspirin"]


def test_offline_planner_option_terms_off_is_the_published_key_features_query() -> None:
    from llama_index_ext_causalrag.hypothesis import OfflineHypothesisPlanner

    retr = OverlapRetriever(CORPUS)
    published = HypothesisQueryTransform(llm=None, retriever=retr, planner=OfflineHypothesisPlanner(option_terms=False))
    out = published.run(QUESTION, metadata={"options": OPTIONS})
    assert out.queries["key_features"] == " ".join(key_terms(QUESTION))
    default = HypothesisQueryTransform(llm=None, retriever=retr).run(QUESTION, metadata={"options": OPTIONS})
    assert {r: default.queries[r] for r in ("support", "distinguish")} == {
        r: out.queries[r] for r in ("support", "distinguish")
    }  # only q3 differs
    # an option term already in the question is not repeated; open and yes/no questions are unchanged
    repeat = HypothesisQueryTransform(llm=None, retriever=retr).run(
        QUESTION, metadata={"options": {"A": "vitamin k epoxide", "B": "heparin"}}
    )
    assert repeat.queries["key_features"].split() == key_terms(QUESTION) + ["heparin"]
    for opts in ({}, {"A": "yes", "B": "no", "C": "maybe"}):
        plan = HypothesisQueryTransform(llm=None, retriever=retr).run(QUESTION, metadata={"options": opts})
        assert plan.queries["key_features"] == " ".join(key_terms(QUESTION))


def test_offline_planner_without_retriever_names_the_fix() -> None:
    with pytest.raises(ValueError, match="needs a retriever"):
        HypothesisQueryTransform(llm=None).run(QUESTION, metadata={"options": OPTIONS})


def test_offline_planner_open_question_and_polar_options() -> None:
    retr = OverlapRetriever(CORPUS)
    t = HypothesisQueryTransform(llm=None, retriever=retr)
    out = t.run(QUESTION, metadata={"options": {"A": "yes", "B": "no", "C": "maybe"}})
    hyp = out.metadata["hypothesis"]
    assert hyp["working_option"] is None
    assert hyp["working_answer"].startswith("warfarin")  # the best passage is the draft
    assert out.queries["support"].startswith(QUESTION) and "slow" in out.queries["support"]


# -- retriever ---------------------------------------------------------------------------
def test_retriever_fuses_by_rrf_with_provenance() -> None:
    retr = OverlapRetriever(CORPUS)
    hr = HypothesisRetriever(retr, HypothesisQueryTransform(llm=None), per_query_k=2, options=OPTIONS, preset="paper")
    nodes, plan = hr.retrieve_with_plan(QUESTION)
    # recompute RRF by hand from what each query returned
    per_query = [[n.node.node_id for n in retr.retrieve(plan.queries[r])][:2] for r in QUERY_ROLES]
    expected: dict = {}
    for ranking in per_query:
        for rank, nid in enumerate(ranking, start=1):
            expected[nid] = expected.get(nid, 0.0) + 1.0 / (60 + rank)
    assert [n.node.node_id for n in nodes] == sorted(expected, key=lambda k: -expected[k])
    for rank, n in enumerate(nodes, start=1):
        prov = get_provenance(n)
        assert prov["rank"] == rank and prov["method"] == "hcqr"
        assert n.score == pytest.approx(expected[n.node.node_id])
        for role, r in prov["found_by"].items():
            assert per_query[QUERY_ROLES.index(role)][r - 1] == n.node.node_id
        assert PROVENANCE_KEY not in n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "warfarin" not in str(n.node.metadata.get("hypothesis", ""))
    assert all(PROVENANCE_KEY not in c.metadata for c in CORPUS)  # inputs not mutated


def test_ablation_runs_only_the_chosen_queries() -> None:
    retr = OverlapRetriever(CORPUS)
    hr = HypothesisRetriever(retr, per_query_k=3, use_queries=("support", "key_features"), options=OPTIONS)
    nodes, plan = hr.retrieve_with_plan(QUESTION)
    retr.queries.clear()
    hr.retrieve_with_plan(plan)
    assert retr.queries == [plan.queries["support"], plan.queries["key_features"]]
    assert all("distinguish" not in get_provenance(n)["found_by"] for n in nodes)


def test_empty_retriever_result_gives_empty_list() -> None:
    hr = HypothesisRetriever(EmptyRetriever(), budget_tokens=100)
    assert hr.retrieve(QueryBundle(QUESTION)) == []
    assert hr.retrieve_with_plan(QUESTION, OPTIONS)[0] == []


def test_budget_smaller_than_one_node_truncates_the_best_node() -> None:
    long_nodes = [
        _node("long1", " ".join(["warfarin vitamin epoxide reductase"] * 40), "d1"),
        _node("long2", " ".join(["heparin aptt"] * 40), "d2"),
    ]
    hr = HypothesisRetriever(OverlapRetriever(long_nodes), budget_tokens=10, options=OPTIONS)
    full = HypothesisRetriever(OverlapRetriever(long_nodes), options=OPTIONS).retrieve(QUESTION)
    out = hr.retrieve(QUESTION)
    assert len(out) == 1
    assert out[0].node.node_id == full[0].node.node_id  # the best node, not dropped
    text = out[0].node.get_content()
    assert 0 < count_tokens(text) <= 12 and full[0].node.get_content().startswith(text)
    assert out[0].node.end_char_idx == out[0].node.start_char_idx + len(text)
    assert 0 < get_provenance(out[0])["kept_fraction"] < 1


def test_duplicate_spans_are_removed() -> None:
    nodes = [
        _node("a", "warfarin vitamin epoxide reductase anticoagulant", "d1", 0),
        _node("a_window", "warfarin vitamin epoxide reductase", "d1", 0),  # inside a's span
        _node("b", "warfarin vitamin epoxide", "d2", 0),  # same offsets, other document
    ]
    out = HypothesisRetriever(OverlapRetriever(nodes), options=OPTIONS).retrieve(QUESTION)
    ids = [n.node.node_id for n in out]
    assert "b" in ids and ("a" in ids) != ("a_window" in ids)


def test_aretrieve_equals_retrieve() -> None:
    hr = HypothesisRetriever(OverlapRetriever(CORPUS), per_query_k=3, options=OPTIONS)
    sync = hr.retrieve(QUESTION)
    async_ = asyncio.run(hr.aretrieve(QUESTION))
    assert [(n.node.node_id, n.score) for n in sync] == [(n.node.node_id, n.score) for n in async_]
    llm_hr = HypothesisRetriever(
        OverlapRetriever(CORPUS), HypothesisQueryTransform(llm=ScriptedLLM(outputs=[_good_json()] * 2)), options=OPTIONS
    )
    assert [n.node.node_id for n in llm_hr.retrieve(QUESTION)] == [
        n.node.node_id for n in asyncio.run(llm_hr.aretrieve(QUESTION))
    ]


def test_works_inside_transform_retriever() -> None:
    llm = ScriptedLLM(outputs=[_good_json()])
    seen: List[QueryBundle] = []

    class Spy(EmptyRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
            seen.append(query_bundle)
            return []

    TransformRetriever(Spy(), HypothesisQueryTransform(llm=llm), transform_metadata={"options": OPTIONS}).retrieve(
        QUESTION
    )
    assert seen[0].query_str == QUESTION and len(seen[0].embedding_strs) == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"per_query_k": 0}, "per_query_k"),
        ({"budget_tokens": 0}, "budget_tokens"),
        ({"use_queries": ("support", "q9")}, "use_queries"),
        ({"overlap_threshold": 0.0}, "overlap_threshold"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HypothesisRetriever(EmptyRetriever(), **kwargs)


# -- DUR evaluator ---------------------------------------------------------------------
def test_dur_evaluator_labels_and_aggregates() -> None:
    llm = ScriptedLLM(outputs=["ENTAILED\nproves it", "Useful - small step", "NOT_USEFUL: background", "???"])
    ev = DecisionUsefulnessEvaluator(llm=llm)
    res = [
        ev.evaluate(query=QUESTION, contexts=["warfarin blocks vkor"], reference="B", options=OPTIONS) for _ in range(4)
    ]
    assert [DecisionUsefulnessEvaluator.label_of(r) for r in res] == ["entailed", "useful", "not_useful", None]
    assert res[0].passing and res[1].passing and not res[2].passing and res[3].invalid_result
    assert "B. warfarin" in llm.prompts[0]
    dur = DecisionUsefulnessEvaluator.decision_useful_rate(res)
    assert dur["dur"] == pytest.approx(2 / 3) and dur["invalid"] == 1


def test_dur_evaluator_label_probabilities_from_first_token_logprobs() -> None:
    import math

    from llama_index.core.base.llms.types import LogProb

    from fakes import ScriptedLLM as ResponseLLM  # returns ready CompletionResponses

    first = [
        LogProb(token=t, logprob=math.log(p), bytes=[])
        for t, p in (("NOT", 0.4), ("ENTA", 0.3), (" use", 0.1), ("Label", 0.2))
    ]
    llm = ResponseLLM(lambda p, i: CompletionResponse(text="NOT_USEFUL - background", logprobs=[first]))
    res = DecisionUsefulnessEvaluator(llm=llm).evaluate(
        query=QUESTION, contexts=["warfarin blocks vkor"], reference="B", options=OPTIONS
    )
    assert DecisionUsefulnessEvaluator.label_of(res) == "not_useful"  # the label still comes from the text
    assert res.label_probs == pytest.approx({"entailed": 0.375, "useful": 0.125, "not_useful": 0.5})
    assert res.p_decision_useful == pytest.approx(0.5)
    plain = DecisionUsefulnessEvaluator(llm=ScriptedLLM(outputs=["USEFUL"])).evaluate(
        query=QUESTION, contexts=["x"], reference="B", options=OPTIONS
    )
    assert plain.label_probs is None and plain.p_decision_useful is None


def test_dur_evaluator_offline_and_empty_context() -> None:
    ev = DecisionUsefulnessEvaluator(llm=None)
    useful = ev.evaluate(query=QUESTION, contexts=["Warfarin is a VKOR blocker"], reference="B", options=OPTIONS)
    not_useful = ev.evaluate(query=QUESTION, contexts=["heparin"], reference="B", options=OPTIONS)
    empty = ev.evaluate(query=QUESTION, contexts=[], reference="B", options=OPTIONS)
    assert [ev.label_of(r) for r in (useful, not_useful, empty)] == ["useful", "not_useful", "not_useful"]
    with pytest.raises(ValueError, match="reference="):
        ev.evaluate(query=QUESTION, contexts=["x"])


# -- hardening ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, label",
    [
        ("Not entailed; not useful.", "not_useful"),
        ("NOT ENTAILED, but USEFUL after one step", "useful"),
        ("Entailed? No.\nlabel: NOT_USEFUL", "not_useful"),
        ("USEFUL at first sight.\nLabel: useful\nLabel: NOT_USEFUL", "not_useful"),
        ("isn't useful", "not_useful"),
        ("ENTAILED\nproves it", "entailed"),
        ("not entailed", None),
    ],
)
def test_dur_label_parser_understands_negation(reply: str, label: Any) -> None:
    from llama_index_ext_causalrag.hypothesis.evaluator import parse_label

    assert parse_label(reply) == label


def test_dur_contexts_given_as_one_string_is_one_context() -> None:
    llm = ScriptedLLM(outputs=["USEFUL - ok"])
    res = DecisionUsefulnessEvaluator(llm=llm).evaluate(
        query=QUESTION, contexts="warfarin blocks vkor", reference="B", options=OPTIONS
    )
    assert res.contexts == ["warfarin blocks vkor"]
    assert "warfarin blocks vkor" in llm.prompts[0] and "w\n\na\n\nr" not in llm.prompts[0]


class RaisingLLM(ScriptedLLM):
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        raise ConnectionRefusedError("the server is down")


def test_dur_judge_of_a_failing_llm_is_an_invalid_result_with_the_reason() -> None:
    from llama_index_ext_causalrag.llm.io import RetryPolicy

    ev = DecisionUsefulnessEvaluator(llm=RaisingLLM(), retry_policy=RetryPolicy(max_retries=2, sleep=lambda s: None))
    res = ev.evaluate(query=QUESTION, contexts=["x"], reference="B", options=OPTIONS)
    assert res.invalid_result and "the server is down" in res.invalid_reason
    assert "nested async" not in res.invalid_reason.lower()
    assert len(ev._llm.prompts) == 3  # retried with backoff first

    async def inside_a_loop() -> Any:  # evaluate() also works where an event loop already runs
        return ev.evaluate(query=QUESTION, contexts=["x"], reference="B", options=OPTIONS)

    assert asyncio.run(inside_a_loop()).invalid_result


def test_dur_evaluator_through_batch_eval_runner_and_evaluate_many() -> None:
    from llama_index.core.evaluation import BatchEvalRunner

    from fakes import AsyncScriptedLLM

    llm = AsyncScriptedLLM(
        lambda p, i: "USEFUL - yes" if "warfarin" in p.split("Question:")[0] else "NOT_USEFUL", delay=0.05
    )
    ev = DecisionUsefulnessEvaluator(llm=llm)
    items = [
        {"query": QUESTION, "contexts": [c], "reference": "B", "options": OPTIONS}
        for c in ["warfarin blocks vkor", "heparin", "warfarin again", "aspirin"] * 4
    ]
    many = ev.evaluate_many(items, num_workers=8)
    assert 1 < llm.max_in_flight <= 8, llm.max_in_flight  # the 16 calls overlapped, at most 8 at once
    assert [ev.label_of(r) for r in many[:4]] == ["useful", "not_useful", "useful", "not_useful"]
    runner = BatchEvalRunner({"dur": ev}, workers=4)
    out = asyncio.run(
        runner.aevaluate_response_strs(
            queries=[QUESTION] * 4,
            response_strs=[""] * 4,
            contexts_list=[[it["contexts"][0]] for it in items[:4]],
            reference=["B"] * 4,
            options=[OPTIONS] * 4,
        )
    )
    assert [ev.label_of(r) for r in out["dur"]] == ["useful", "not_useful", "useful", "not_useful"]


def test_a_failing_planner_llm_falls_back_to_the_offline_planner(caplog: pytest.LogCaptureFixture) -> None:
    from llama_index_ext_causalrag.llm.io import RetryPolicy

    t = HypothesisQueryTransform(
        llm=RaisingLLM(),
        retriever=OverlapRetriever(CORPUS),
        retry_policy=RetryPolicy(max_retries=1, sleep=lambda s: None),
    )
    with caplog.at_level(logging.WARNING):
        out = t.run(QUESTION, metadata={"options": OPTIONS})
    assert out.metadata["planner"] == "offline" and "the LLM call failed" in caplog.text


def test_planner_run_batch_equals_one_by_one() -> None:
    answers = [_good_json(working_answer=w) for w in ("A", "B", "C")]
    one = [
        HypothesisQueryTransform(llm=ScriptedLLM(outputs=[a])).run(QUESTION, metadata={"options": OPTIONS})
        for a in answers
    ]

    def by_prompt_order(p: str, i: int) -> str:
        return answers[int(re.search(r"question (\d)", p).group(1))]

    from fakes import AsyncScriptedLLM

    llm = AsyncScriptedLLM(by_prompt_order, delay=0.02)
    qs = [f"{QUESTION} question {k}" for k in range(3)]
    batch = HypothesisQueryTransform(llm=llm).run_batch(qs, metadata={"options": OPTIONS}, num_workers=3)
    assert [b.metadata["hypothesis"]["working_answer"] for b in batch] == [
        o.metadata["hypothesis"]["working_answer"] for o in one
    ]


def test_original_list_searches_the_question_with_its_options() -> None:
    from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES

    retr = OverlapRetriever(CORPUS)
    hr = HypothesisRetriever(retr, per_query_k=3, use_queries=ALL_ROLES, options=OPTIONS)
    nodes, plan = hr.retrieve_with_plan(QUESTION)
    retr.queries.clear()
    hr.retrieve_with_plan(plan)
    original = f"{QUESTION}\nA. heparin\nB. warfarin\nC. aspirin"
    assert retr.queries == [plan.queries[r] for r in QUERY_ROLES] + [original]
    assert any("original" in get_provenance(n)["found_by"] for n in nodes)
    # an open question's original list is the question alone
    open_plan = hr.plan(QueryBundle("What does warfarin block?"), options={})
    assert HypothesisRetriever.original_query(open_plan) == "What does warfarin block?"
    with pytest.raises(ValueError, match="original"):
        HypothesisRetriever(retr, use_queries=("nope",))


def test_role_weights_scale_each_list_in_the_fusion() -> None:
    from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES

    retr = OverlapRetriever(CORPUS)
    weights = {"original": 3.0, "support": 0.5}
    hr = HypothesisRetriever(
        retr, per_query_k=2, use_queries=ALL_ROLES, options=OPTIONS, role_weights=weights, rrf_k=60
    )
    nodes, plan = hr.retrieve_with_plan(QUESTION)
    texts = [plan.queries[r] if r != "original" else HypothesisRetriever.original_query(plan) for r in ALL_ROLES]
    preset = {"distinguish": 0.5}  # the default preset's, with content-bearing options
    expected: dict = {}
    for role, text in zip(ALL_ROLES, texts):
        for rank, n in enumerate(retr.retrieve(text)[:2], start=1):
            w = weights.get(role, preset.get(role, 1.0))
            expected[n.node.node_id] = expected.get(n.node.node_id, 0.0) + w / (60 + rank)
    assert [n.score for n in nodes] == pytest.approx(sorted(expected.values(), reverse=True))
    assert nodes[0].node.node_id == max(expected, key=expected.get)
    for bad in ({"original": 0.0}, {"nope": 1.0}, {"support": float("nan")}):
        with pytest.raises(ValueError, match="role_weights"):
            HypothesisRetriever(retr, role_weights=bad)


# -- presets -----------------------------------------------------------------------------
def test_default_preset_runs_four_lists_and_weighs_original_two_distinguish_half_with_content_options() -> None:
    retr = OverlapRetriever(CORPUS)
    hr = HypothesisRetriever(retr, options=OPTIONS)
    assert hr.use_queries == ALL_ROLES and hr.per_query_k == 5 and hr.rrf_k == 10.0
    nodes, plan = hr.retrieve_with_plan(QUESTION)
    assert hr.weights(plan) == [1.0, 0.5, 1.0, 2.0]
    texts = [plan.queries[r] for r in QUERY_ROLES] + [HypothesisRetriever.original_query(plan)]
    expected: dict = {}
    for w, text in zip(hr.weights(plan), texts):
        for rank, n in enumerate(retr.retrieve(text)[:5], start=1):
            expected[n.node.node_id] = expected.get(n.node.node_id, 0.0) + w / (10 + rank)
    assert [n.score for n in nodes] == pytest.approx(sorted(expected.values(), reverse=True))
    # the default planner adds the options' terms to q3
    assert "aspirin" in plan.queries["key_features"]
    # open question: the original list is the bare question and weighs 1, like the others
    open_plan = hr.plan(QueryBundle("What does warfarin block?"), options={})
    assert HypothesisRetriever.original_query(open_plan) == "What does warfarin block?"
    assert hr.weights(open_plan) == [1.0, 1.0, 1.0, 1.0]
    polar = hr.plan(QueryBundle(QUESTION), options={"A": "yes", "B": "no"})
    assert hr.weights(polar) == [1.0, 1.0, 1.0, 1.0]
    # an explicit weight wins over the preset's; a role left out weighs 1
    assert HypothesisRetriever(retr, role_weights={"original": 3.0, "support": 0.5}).weights(plan) == [0.5, 0.5, 1, 3]
    assert HypothesisRetriever(retr, role_weights={"distinguish": 1.0}).weights(plan) == [1, 1, 1, 2]


def test_paper_preset_is_the_published_method() -> None:
    retr = OverlapRetriever(CORPUS)
    paper = HypothesisRetriever.from_defaults(retr, preset="paper", options=OPTIONS)
    assert paper.use_queries == QUERY_ROLES and paper.per_query_k == 5
    nodes, plan = paper.retrieve_with_plan(QUESTION)
    assert paper.weights(plan) == [1.0, 1.0, 1.0] and paper.rrf_k == 60.0
    assert plan.queries["key_features"] == " ".join(key_terms(QUESTION))
    assert all("original" not in get_provenance(n)["found_by"] for n in nodes)
    assert (
        HypothesisRetriever(retr, preset="paper", options=OPTIONS).retrieve_with_plan(QUESTION)[1].queries
        == plan.queries
    )  # the constructor builds the same planner
    # explicit arguments override the preset
    assert HypothesisRetriever(retr, preset="paper", use_queries=ALL_ROLES).use_queries == ALL_ROLES
    custom = HYPOTHESIS_PRESETS["default"].with_settings(original_weight=4.0)
    assert HypothesisRetriever(retr, preset=custom, options=OPTIONS).weights(plan)[-1] == 4.0
    with pytest.raises(ValueError, match="unknown preset"):
        HypothesisRetriever(retr, preset="nope")
    with pytest.raises(ValueError, match="rrf_k"):
        HypothesisRetriever(retr, rrf_k=0)


def test_llm_planner_gets_the_four_lists_and_keeps_its_own_queries() -> None:
    retr = OverlapRetriever(CORPUS)
    hr = HypothesisRetriever(retr, HypothesisQueryTransform(llm=ScriptedLLM(outputs=[_good_json()])), options=OPTIONS)
    nodes, plan = hr.retrieve_with_plan(QUESTION)
    assert plan.metadata["planner"] == "llm"
    assert plan.queries["key_features"] == "anticoagulant vitamin k epoxide reductase"  # the LLM's, unchanged
    assert retr.queries[-4:] == [plan.queries[r] for r in QUERY_ROLES] + [HypothesisRetriever.original_query(plan)]
    assert hr.weights(plan) == [1.0, 0.5, 1.0, 2.0]
