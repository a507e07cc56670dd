"""HCQR bench entries on a tiny MCQ dataset with a hashing embedder (offline, fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core.schema import Document

from causalrag_bench.registry import BenchContext, available
from causalrag_bench.runner import run_bench
from causalrag_bench.types import EvalDataset, EvalExample, GoldSpan
from fakes import HashEmbedding
from llama_index_ext_causalrag.text.provenance import get_provenance

EXPL = {
    "q1": "Warfarin blocks vitamin K epoxide reductase; heparin activates antithrombin.",
    "q2": "Tropicamide is the shortest acting mydriatic; atropine lasts longest.",
    "q3": "Ethosuximide is the drug of choice for absence seizures; carbamazepine worsens them.",
}
QUESTIONS = {
    "q1": (
        "Which anticoagulant blocks vitamin K epoxide reductase?",
        ["Heparin", "Warfarin", "Aspirin", "Dabigatran"],
        "B",
    ),
    "q2": ("Shortest acting mydriatic?", ["Atropine", "Homatropine", "Tropicamide", "Cyclopentolate"], "C"),
    "q3": ("Drug of choice for absence seizures?", ["Ethosuximide", "Carbamazepine", "Phenytoin", "Valproate"], "A"),
}


def _dataset() -> EvalDataset:
    docs = [Document(text=t, id_=qid) for qid, t in EXPL.items()]
    exs = [
        EvalExample(qid, q, [GoldSpan(qid, 0, len(EXPL[qid]))], {"options": dict(zip("ABCD", opts)), "answer": ans})
        for qid, (q, opts, ans) in QUESTIONS.items()
    ]
    return EvalDataset("mini_mcq", "mem", docs, exs, {"gold_rule": "doc"})


def test_entries_are_registered() -> None:
    names = available()
    for n in ("q_raw", "q_options", "hcqr", "hcqr_no_q1", "hcqr_no_q2", "hcqr_no_q3", "hcqr_no_orig", "hcqr_paper"):
        assert names[n].group == "hcqr" and not names[n].needs_llm
    assert not [n for n in names if n.startswith("hcqr_orig")]  # hcqr itself now holds the original list
    for n in ("hcqr_llm", "hyde", "fusion_llm"):
        assert names[n].needs_llm


def test_bench_runs_hcqr_and_baselines(tmp_path: Path) -> None:
    ds = _dataset()
    ctx = BenchContext(dataset=ds, embed_model=HashEmbedding(), work_dir=tmp_path, top_k=3)
    names = ["q_raw", "q_options", "hcqr", "hcqr_no_q2"]
    report = run_bench(ds, names, ctx, budgets=(64,), out_dir=tmp_path / "out")
    rows = {r["retriever"]: r for r in report["rows"]}
    assert set(rows) == set(names) and all(r["n"] == 3 for r in rows.values())
    for r in rows.values():
        assert 0.0 <= r["metrics"]["R@1"] <= 100.0
    stats = json.loads((tmp_path / "artifacts" / "hcqr" / "hcqr_planner_stats.json").read_text())
    assert stats["questions"] == 3 and stats["with_working_option"] == 3
    hr = available()["hcqr"].build(ctx)
    nodes = hr.retrieve_example(ds.examples[0])
    assert nodes and all(get_provenance(n)["method"] == "hcqr" for n in nodes)


def test_llm_entries_need_an_llm(tmp_path: Path) -> None:
    ctx = BenchContext(dataset=_dataset(), embed_model=HashEmbedding(), work_dir=tmp_path)
    with pytest.raises(ValueError, match="needs an LLM"):
        available()["hcqr_llm"].build(ctx)


def _bench_llm_script(prompt: str, i: int) -> str:
    if "JSON:" in prompt:  # hypothesis
        return '{"working_answer": "B", "queries": {"support": "warfarin", "distinguish": "heparin", "key_features": "vitamin K"}}'
    if prompt.rstrip().endswith("Label:"):  # DUR judge
        return "USEFUL - it names the mechanism"
    if prompt.rstrip().endswith("Answer:"):  # answer letter
        return "B"
    return "Warfarin is a vitamin K antagonist."  # HyDE passage


def test_llm_bench_script_answers_judges_and_resumes_without_new_calls(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"))
    import bench_hcqr_llm as bench

    from fakes import ScriptedLLM

    llm = ScriptedLLM(_bench_llm_script)
    ctx = BenchContext(dataset=_dataset(), embed_model=HashEmbedding(), work_dir=tmp_path, top_k=3, llm=llm)
    out = tmp_path / "llm"
    first = bench.run(ctx, limit=2, budget=64, out=out)
    calls = len(llm.prompts)
    assert first["n"] == 2 and set(first["retrieval"]) == {"q_raw", "hyde", "hcqr_llm"}
    assert first["hcqr_planner"] == {"llm": 2, "offline": 0}
    assert first["hcqr_working_answer"]["n"] == 2 and first["hcqr_working_answer"]["working_option_correct"] == 1
    assert first["accuracy"] == {"none": 50.0, "q_raw": 50.0, "hyde": 50.0, "hcqr_llm": 50.0}  # gold: B, C
    assert first["dur"]["hcqr_llm"]["useful"] == 2 and first["dur"]["hcqr_llm"]["dur"] == 100.0
    assert all(
        kw.get("max_tokens") == 4 for p, kw in zip(llm.prompts, llm.call_kwargs) if p.rstrip().endswith("Answer:")
    )
    again = bench.run(ctx, limit=2, budget=64, out=out)
    assert len(llm.prompts) == calls and again == first  # resumed from per_question.jsonl
    assert json.loads((out / "llm_results.json").read_text()) == first


def test_bench_entries_are_the_library_presets(tmp_path: Path) -> None:
    from llama_index_ext_causalrag.hypothesis import ALL_ROLES, QUERY_ROLES

    ctx = BenchContext(dataset=_dataset(), embed_model=HashEmbedding(), work_dir=tmp_path, top_k=3)
    built = {n: available()[n].build(ctx)._plain for n in ("hcqr", "hcqr_paper", "hcqr_no_q3", "hcqr_no_orig")}
    assert built["hcqr"].use_queries == ALL_ROLES and built["hcqr"].config.fusion.original_weight == 2.0
    assert built["hcqr_paper"].use_queries == QUERY_ROLES and built["hcqr_paper"].config.planning.option_terms is False
    assert built["hcqr_no_q3"].use_queries == ("support", "distinguish", "original")
    assert built["hcqr_no_orig"].use_queries == QUERY_ROLES and built["hcqr_no_orig"].config.planning.option_terms
