"""CausalGraphIndex with a scripted LLM: malformed output, retries, caching, logprobs, estimate."""

from __future__ import annotations

import json
import logging
import re

import pytest
from llama_index.core import Document
from llama_index.core.base.llms.types import CompletionResponse, LogProb
from llama_index.core.schema import TextNode

from _causal_graph_helpers import TOPICS, HashEmbedding, ScriptedLLM, corpus
from llama_index_ext_causalrag.causal_graph import (
    CausalGraphIndex,
    LLMEntityExtractor,
    LLMGateJudge,
)
from llama_index_ext_causalrag.causal_graph.graph import Module
from llama_index_ext_causalrag.llm.cache import LLMCache, StageCost
from llama_index_ext_causalrag.llm.parse import p_yes_from_response

ALL = [e for ents in TOPICS.values() for e in ents]


def extraction_json(text: str) -> str:
    found = [e for e in ALL if e in text]
    rels = [{"source": a, "target": b, "description": "linked", "strength": 7} for a, b in zip(found, found[1:])]
    return json.dumps(
        {"entities": [{"name": e, "type": "thing", "description": f"about {e}"} for e in found], "relations": rels}
    )


def smart_script(bad_extract_for=None, bad_judge=False):
    """Answers every prompt kind; malformed for the unit containing ``bad_extract_for``."""

    def script(prompt: str, i: int) -> str:
        if prompt.startswith("Extract the key entities"):
            text = prompt.split("Text:\n", 1)[1]
            if bad_extract_for and bad_extract_for in text:
                return '{"entities": [ {"name": "broken"'  # truncated JSON, every time
            return extraction_json(text)
        if "community of a knowledge graph" in prompt:
            first = re.search(r"^- ([^:]+):", prompt, re.M)
            return json.dumps(
                {"title": f"About {first.group(1) if first else 'x'}", "summary": "A community. It has members."}
            )
        if "Two topics" in prompt:
            return "Maybe, hard to say." if bad_judge else "yes - one drives the other"
        raise AssertionError(f"unexpected prompt: {prompt[:60]}")

    return script


def test_extractor_retries_malformed_json_once_then_succeeds(tmp_path):
    answers = ["not json at all", extraction_json("drought stress and tree mortality")]
    llm = ScriptedLLM(lambda p, i: answers[i])
    ext = LLMEntityExtractor(llm, cache_dir=str(tmp_path))
    cost = StageCost()
    out = ext.extract([TextNode(text="drought stress and tree mortality", id_="u1")], cost=cost)[0]
    assert out.ok and {e.name for e in out.entities} == {"drought stress", "tree mortality"}
    assert out.relations[0].weight == pytest.approx(0.7)
    assert cost.calls == 2 and cost.failures == 0
    assert "not valid JSON" in llm.prompts[1]


def test_extractor_skips_unit_after_two_malformed_answers_with_warning(tmp_path, caplog):
    llm = ScriptedLLM(lambda p, i: "```json\n{oops}\n```")
    ext = LLMEntityExtractor(llm, cache_dir=str(tmp_path))
    cost = StageCost()
    with caplog.at_level(logging.WARNING):
        out = ext.extract([TextNode(text="anything", id_="u9")], cost=cost)[0]
    assert not out.ok and out.entities == [] and cost.calls == 2 and cost.failures == 1
    assert "u9" in caplog.text and "skipping this unit" in caplog.text


def test_extractor_keeps_the_complete_part_of_an_answer_cut_off_by_the_token_limit(tmp_path, caplog):
    full = extraction_json("drought stress and tree mortality and soil moisture")
    cut = full[: full.rindex('"description": "linked"') + 20]  # inside the second relation's description
    llm = ScriptedLLM(lambda p, i: cut)
    cost = StageCost()
    with caplog.at_level(logging.INFO):
        out = LLMEntityExtractor(llm, cache_dir=str(tmp_path)).extract([TextNode(text="t", id_="u1")], cost=cost)[0]
    assert out.ok and {e.name for e in out.entities} == {"drought stress", "tree mortality", "soil moisture"}
    first, second = out.relations  # the second keeps the members it completed: source and target
    assert (first.source, first.target, first.description) == ("drought stress", "tree mortality", "linked")
    assert (second.source, second.target, second.description) == ("tree mortality", "soil moisture", "")
    assert cost.calls == 1 and cost.failures == 0  # no retry: it would be cut at the same place
    assert "cut off" in caplog.text


def test_shipped_prompts_show_the_llm_single_braces():
    # LlamaIndex formats templates without unescaping "{{": a doubled brace reaches the LLM,
    # and a small model copies it into invalid JSON.
    from llama_index_ext_causalrag.causal_graph import prompts as cg
    from llama_index_ext_causalrag.hypothesis import prompts as hy

    shipped = [v for m in (cg, hy) for k, v in vars(m).items() if k.startswith("DEFAULT_") and k.endswith("_PROMPT")]
    assert len(shipped) >= 7
    for prompt in shipped:
        text = prompt.format(**{v: "x" for v in prompt.template_vars})
        assert "{{" not in text and "}}" not in text, prompt.template[:60]


def test_extractor_caches_answers_on_disk(tmp_path):
    llm = ScriptedLLM(lambda p, i: extraction_json(p))
    nodes = [TextNode(text=f"{e} matters", id_=e) for e in ALL[:3]]
    LLMEntityExtractor(llm, cache_dir=str(tmp_path)).extract(nodes)
    assert len(llm.prompts) == 3
    cost = StageCost()
    again = LLMEntityExtractor(llm, cache_dir=str(tmp_path)).extract(nodes, cost=cost)
    assert len(llm.prompts) == 3 and cost.calls == 0 and cost.cache_hits == 3
    assert [e.name for e in again[0].entities] == [ALL[0]]
    assert list(tmp_path.rglob("*.json"))  # plain JSON files


def test_cache_moves_to_another_machine_as_one_jsonl_file(tmp_path):
    llm = ScriptedLLM(lambda p, i: extraction_json(p))
    nodes = [TextNode(text=f"{e} matters", id_=e) for e in ALL[:3]]
    LLMEntityExtractor(llm, cache_dir=str(tmp_path / "here")).extract(nodes)
    packed = tmp_path / "cache.jsonl"
    assert LLMCache(tmp_path / "here").export_jsonl(packed) == 3
    assert LLMCache(tmp_path / "there").import_jsonl(packed) == 3
    assert LLMCache(tmp_path / "there").import_jsonl(packed) == 0  # nothing new the second time
    cost = StageCost()
    again = LLMEntityExtractor(llm, cache_dir=str(tmp_path / "there")).extract(nodes, cost=cost)
    assert len(llm.prompts) == 3 and cost.calls == 0 and cost.cache_hits == 3
    assert [e.name for e in again[1].entities] == [ALL[1]]
    packed.write_text('{"text": "not an entry"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: not an LLM cache entry"):
        LLMCache(tmp_path / "there").import_jsonl(packed)


class LocalFileLLM(ScriptedLLM):
    """A scripted LLM that, like ``LlamaCPP``, is known by the path of its model file."""

    model_path: str = ""


def test_answers_of_a_local_model_file_are_cache_hits_wherever_the_file_lives(tmp_path):
    nodes = [TextNode(text=f"{e} matters", id_=e) for e in ALL[:3]]
    here = LocalFileLLM(lambda p, i: extraction_json(p), model_path="/home/ana/models/qwen-1.5b.gguf")
    LLMEntityExtractor(here, cache_dir=str(tmp_path)).extract(nodes)
    assert len(here.prompts) == 3
    there = LocalFileLLM(lambda p, i: extraction_json(p), model_path="/opt/llm/qwen-1.5b.gguf")
    cost = StageCost()
    LLMEntityExtractor(there, cache_dir=str(tmp_path)).extract(nodes, cost=cost)
    assert there.prompts == [] and cost.cache_hits == 3
    other_model = LocalFileLLM(lambda p, i: extraction_json(p), model_path="/opt/llm/qwen-7b.gguf")
    cost = StageCost()
    LLMEntityExtractor(other_model, cache_dir=str(tmp_path)).extract(nodes, cost=cost)
    assert len(other_model.prompts) == 3 and cost.cache_hits == 0


def test_judge_uses_p_yes_from_logprobs_over_the_text(tmp_path):
    def script(prompt, i):
        return CompletionResponse(
            text="yes - sure",
            logprobs=[[LogProb(token="yes", logprob=-2.0, bytes=[]), LogProb(token="no", logprob=-0.2, bytes=[])]],
        )

    judge = LLMGateJudge(ScriptedLLM(script), p_yes_threshold=0.5, cache_dir=str(tmp_path))
    a, b = Module("a", 0, title="A", summary="x"), Module("b", 0, title="B", summary="y")
    jd = judge.judge(a, b, 0.3, None, StageCost())
    assert not jd.yes and jd.score == pytest.approx(1 / (1 + 2.718281828**1.8), rel=1e-4)
    assert p_yes_from_response(CompletionResponse(text="no")) is None


def test_judge_answer_length_cap_reaches_the_llm_only_when_set(tmp_path):
    a, b = Module("a", 0, title="A", summary="x"), Module("b", 0, title="B", summary="y")
    llm = ScriptedLLM(lambda p, i: "no - unrelated")
    LLMGateJudge(llm, cache_dir=str(tmp_path / "1"), max_answer_tokens=24).judge(a, b, 0.3, None, StageCost())
    LLMGateJudge(llm, cache_dir=str(tmp_path / "2")).judge(a, b, 0.3, None, StageCost())
    assert llm.call_kwargs == [{"max_tokens": 24}, {}]
    with pytest.raises(ValueError, match="max_answer_tokens"):
        LLMGateJudge(llm, max_answer_tokens=0)


def test_judge_malformed_twice_degrades_to_no_gate(tmp_path, caplog):
    judge = LLMGateJudge(ScriptedLLM(lambda p, i: "I cannot decide"), cache_dir=str(tmp_path))
    a, b = Module("a", 0, title="A", summary="x"), Module("b", 0, title="B", summary="y")
    cost = StageCost()
    with caplog.at_level(logging.WARNING):
        jd = judge.judge(a, b, 0.0, None, cost)
    assert not jd.yes and jd.failed and cost.calls == 2 and cost.failures == 1
    assert "no gate for this pair" in caplog.text
    assert LLMGateJudge.parse('{"answer": "Yes", "reason": "r"}') == (True, "r")


def _llm_build(llm, tmp_path, **kw):
    return CausalGraphIndex.from_documents(
        corpus(2),
        llm=llm,
        embed_model=HashEmbedding(),
        show_progress=False,
        max_cluster_size=3,
        cache_dir=str(tmp_path / "cache"),
        **kw,
    )


def test_llm_build_survives_malformed_extractor_and_judge(tmp_path, caplog):
    llm = ScriptedLLM(smart_script(bad_extract_for="coral bleaching", bad_judge=True))
    with caplog.at_level(logging.WARNING):
        idx = _llm_build(llm, tmp_path)
    cost = idx.build_stats["cost"]
    bad_units = sum("coral bleaching" in u.get_content() for u in idx.units)
    assert cost["extract"]["failures"] == bad_units > 0
    assert cost["gates"]["failures"] == idx.build_stats["gates"]["judged"] > 0
    assert idx.graph.gates == []
    assert len(idx.graph.entities) > 0 and len(idx.graph.modules) > 0
    assert "skipping this unit" in caplog.text and "no gate for this pair" in caplog.text
    assert all(m.title.startswith("About ") for m in idx.graph.modules.values())


def test_llm_rebuild_from_cache_makes_zero_calls_and_estimate(tmp_path):
    llm = ScriptedLLM(smart_script())
    est = CausalGraphIndex.estimate(corpus(2), llm=llm, cache_dir=str(tmp_path / "cache"))
    first = _llm_build(llm, tmp_path)
    calls = len(llm.prompts)
    assert first.build_stats["llm_calls"] == calls > 0
    assert est["extract"]["calls"] == first.build_stats["cost"]["extract"]["calls"] == len(first.units)
    assert est["extract"]["prompt_tokens"] == first.build_stats["cost"]["extract"]["prompt_tokens"]
    assert len(first.graph.gates) > 0
    second = _llm_build(llm, tmp_path)
    assert len(llm.prompts) == calls and second.build_stats["llm_calls"] == 0
    assert second.graph.to_dict() == first.graph.to_dict()
    est2 = CausalGraphIndex.estimate(corpus(2), llm=llm, cache_dir=str(tmp_path / "cache"))
    assert est2["extract"]["calls"] == 0 and est2["extract"]["cached_units"] == len(first.units)
    # once every extraction is paid for, the prediction counts the real entity names, with no call
    assert est["basis"] == "entities_per_unit=8"
    assert est2["basis"] == f"cached extractions ({len(first.graph.entities)} distinct entity names)"
    assert est2["summaries"]["calls"] == round(len(first.graph.entities) / 5 * 1.25)
    assert len(llm.prompts) == calls


def test_estimate_without_llm_is_zero():
    est = CausalGraphIndex.estimate(corpus(1))
    assert est["total_calls"] == 0 and est["units"] == len(TOPICS)


def test_ledger_counts_every_paid_call_across_builds_and_machines(tmp_path):
    bad = next(iter(TOPICS.values()))[0]
    llm = ScriptedLLM(smart_script(bad_extract_for=bad))
    first = _llm_build(llm, tmp_path)
    cache = LLMCache(tmp_path / "cache")
    spent = cache.spent()
    # retries of the malformed unit are paid calls too: the ledger has them, the answer cache does not
    assert sum(s["calls"] for s in spent.values()) == len(llm.prompts) == first.build_stats["llm_calls"]
    for stage, s in first.build_stats["cost"].items():
        assert spent.get(stage, {}).get("calls", 0) == s["calls"], stage
        if s["calls"]:
            assert spent[stage]["prompt_tokens"] == s["prompt_tokens"] > 0
    broken = first.build_stats["cost"]["extract"]["failures"]
    assert broken > 0
    _llm_build(llm, tmp_path)  # each broken unit is asked again (twice); nothing else
    total = first.build_stats["llm_calls"] + 2 * broken
    assert sum(s["calls"] for s in cache.spent().values()) == len(llm.prompts) == total
    packed = tmp_path / "cache.jsonl"
    cache.export_jsonl(packed)
    there = LLMCache(tmp_path / "there")
    there.import_jsonl(packed)
    there.import_jsonl(packed)  # ledger lines are not doubled
    assert there.spent() == cache.spent()


def test_estimate_counts_a_duplicated_text_once(tmp_path):
    from llama_index.core import Document

    docs = corpus(1)
    docs += [Document(text=d.text, doc_id=d.doc_id + "-copy") for d in docs[:2]]  # an article published twice
    llm = ScriptedLLM(smart_script())
    est = CausalGraphIndex.estimate(docs, llm=llm, cache_dir=str(tmp_path / "cache"))
    idx = CausalGraphIndex.from_documents(
        docs,
        llm=llm,
        embed_model=HashEmbedding(),
        show_progress=False,
        max_cluster_size=3,
        cache_dir=str(tmp_path / "cache"),
    )
    assert est["units"] == len(idx.units) == est["distinct_units"] + 2
    assert est["extract"]["calls"] == idx.build_stats["cost"]["extract"]["calls"] == len(idx.units) - 2
    assert idx.build_stats["cost"]["extract"]["cache_hits"] == 2


def test_entities_the_llm_left_unrelated_are_linked_within_their_unit(tmp_path):
    from llama_index_ext_causalrag.causal_graph.extract import link_unlinked, parse_extraction

    answer = json.dumps(
        {"entities": [{"name": n} for n in "ABCD"], "relations": [{"source": "A", "target": "B", "strength": 8}]}
    )
    ex = link_unlinked(parse_extraction(answer, "u1"), 0.1)
    pairs = {(r.source, r.target): r.weight for r in ex.relations}
    assert pairs == {
        ("A", "B"): 0.8,
        ("A", "C"): 0.1,
        ("A", "D"): 0.1,
        ("B", "C"): 0.1,
        ("B", "D"): 0.1,
        ("C", "D"): 0.1,
    }
    assert link_unlinked(parse_extraction(answer, "u1"), 0.0).relations == parse_extraction(answer, "u1").relations
    # through the extractor: an answer with no relations still gives a connected unit
    llm = ScriptedLLM(lambda p, i: json.dumps({"entities": [{"name": "drought stress"}, {"name": "tree mortality"}]}))
    out = LLMEntityExtractor(llm, cache_dir=str(tmp_path)).extract([TextNode(text="t", id_="u")])[0]
    assert [(r.source, r.target) for r in out.relations] == [("drought stress", "tree mortality")]
    out = LLMEntityExtractor(llm, cache_dir=str(tmp_path), unlinked_weight=0).extract([TextNode(text="t", id_="u")])[0]
    assert out.relations == []


def test_single_entity_modules_are_summarised_without_an_llm_call(tmp_path, caplog):
    lonely = "a lonely entity"

    def script(prompt, i):
        if prompt.startswith("Extract the key entities") and "Text:\n<<<DATA\nZ" in prompt:
            return json.dumps({"entities": [{"name": lonely, "type": "thing", "description": "stands alone"}]})
        return smart_script()(prompt, i)

    llm = ScriptedLLM(script)
    docs = corpus(2) + [Document(text="Z " + " ".join(["nothing else here."] * 3), doc_id="z")]
    with caplog.at_level(logging.INFO):
        idx = CausalGraphIndex.from_documents(
            docs,
            llm=llm,
            embed_model=HashEmbedding(),
            show_progress=False,
            max_cluster_size=3,
            cache_dir=str(tmp_path / "cache"),
            min_entity_units=1,
        )
    singles = [m for m in idx.graph.modules.values() if len(m.members) == 1]
    assert singles, "the fixture should produce a one-entity module"
    summary_prompts = [p for p in llm.prompts if "community of a knowledge graph" in p]
    assert (
        idx.build_stats["cost"]["summaries"]["calls"] == len(summary_prompts) == len(idx.graph.modules) - len(singles)
    )
    alone = next(m for m in singles if idx.graph.entities[m.members[0]].name == lonely)
    assert alone.title == lonely and "stands alone" in alone.summary
    assert any(f"{len(singles)} module(s) smaller than min_members=2" in m for m in idx.build_stats["messages"])


@pytest.mark.parametrize(
    "bad",
    [
        '{"title": {"text": "Forest"}, "summary": "s"}',
        '{"title": null, "summary": null}',
        '{"title": ["a", "b"], "summary": "s"}',
        '{"title": "t", "summary": {"x": 1}}',
    ],
)
def test_llm_summaries_of_the_wrong_type_are_retried_then_extractive(tmp_path, caplog, bad):
    def script(prompt, i):
        return bad if "community of a knowledge graph" in prompt else smart_script()(prompt, i)

    llm = ScriptedLLM(script)
    with caplog.at_level(logging.WARNING):
        idx = _llm_build(llm, tmp_path)
    asked = [m for m in idx.graph.modules.values() if len(m.members) >= 2]
    assert asked and idx.build_stats["cost"]["summaries"]["calls"] == 2 * len(asked)  # each retried once
    assert idx.build_stats["cost"]["summaries"]["failures"] == len(asked)
    for m in idx.graph.modules.values():
        assert m.title and m.title != "None" and "{" not in m.title and "[" not in m.title
        assert m.summary and m.summary != "None" and "{'" not in m.summary
    assert "using the extractive summary" in caplog.text


def test_extractor_summariser_and_judge_expose_their_prompts(tmp_path):
    from llama_index.core.prompts import PromptTemplate

    from llama_index_ext_causalrag.causal_graph.summaries import LLMSummarizer

    llm = ScriptedLLM(lambda p, i: "no - x")
    ext, summ, judge = LLMEntityExtractor(llm), LLMSummarizer(llm), LLMGateJudge(llm, cache_dir=str(tmp_path))
    assert set(ext.get_prompts()) == {"extract_prompt"}
    assert set(summ.get_prompts()) == {"summary_prompt"}
    assert set(judge.get_prompts()) == {"judge_prompt"}
    judge.update_prompts({"judge_prompt": PromptTemplate("CUSTOM {title_a} {summary_a} {title_b} {summary_b}")})
    judge.judge(Module("a", 0, title="A", summary="x"), Module("b", 0, title="B", summary="y"), 0.1, None, StageCost())
    assert llm.prompts[-1].startswith("CUSTOM <<<DATA\nA\nDATA>>>")
    ext.update_prompts({"extract_prompt": PromptTemplate("MINE {max_entities}: {text}")})
    assert ext.prompt_for("hello").startswith("MINE 15: <<<DATA\nhello")
    summ.update_prompts({"summary_prompt": PromptTemplate("S {members} {relations} {children}")})
    assert summ.get_prompts()["summary_prompt"].template.startswith("S ")
