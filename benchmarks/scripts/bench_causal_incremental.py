"""CausalGraphIndex: insert of the last 10% of HolisQA biology vs a full rebuild.

Builds the index of the first 90% of the articles and inserts the rest, then builds the index
of all articles from scratch, and prints for both the LLM calls by stage, their ratio, and the
``causalrag2`` retriever's CR@512 / CR@1024 on every question (as ``causalrag-bench`` scores
them: ``as_retriever(similarity_top_k=10)``, offline causal filter).

``--mode scripted``: the LLM steps run on a scripted LLM that counts its calls and answers
deterministically: extraction = the offline keyphrase extractor's entities of the unit (at most
the prompt's 15) with co-occurrence relations; summary = a title from the first three members
and a sentence listing the members, tagged with a digest of the prompt (a changed prompt never
gets the old answer); gate = "yes" when the two topics share at least two content words. Each
build gets its own empty LLM cache. ``--mode offline``: the default offline steps (no LLM).

    python benchmarks/scripts/bench_causal_incremental.py --path $DATA/holisqa/biology --mode scripted \\
        --out benchmarks/results/causal_incremental

``--out``: the run is written to ``results.json`` there under its mode (a run of the other mode
already in the file is kept), for the table in docs/updating.md (``python -m causalrag_bench.tables``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from causalrag_bench.cli import provenance_of, write_results
from causalrag_bench.embedding_cache import cached_default_embed_model
from causalrag_bench.loaders import load_dataset
from causalrag_bench.runner import score_question, validate_examples
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex, OfflineEntityExtractor
from llama_index_ext_causalrag.causal_graph.keyphrases import STOPWORDS
from llama_index_ext_causalrag.llm.io import FENCE_CLOSE, FENCE_OPEN

BUDGETS = (512, 1024)
STAGES = ("extract", "summaries", "gates")


def _fenced(prompt: str, after: str) -> str:
    """The first fenced block after ``after`` in ``prompt``."""
    rest = prompt.split(after, 1)[1]
    return rest.split(FENCE_OPEN + "\n", 1)[1].split("\n" + FENCE_CLOSE, 1)[0]


def _words(text: str) -> set:
    return {w for w in re.findall(r"[a-z][a-z0-9-]{2,}", text.lower()) if w not in STOPWORDS}


class CountingScriptedLLM(CustomLLM):
    """Deterministic answers to the three build prompts; ``calls`` counts them by stage."""

    _extractor: Any = PrivateAttr()
    _calls: Counter = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._extractor = OfflineEntityExtractor()
        self._calls = Counter()

    @property
    def calls(self) -> Counter:
        return self._calls

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-bench-llm")

    def _extract(self, prompt: str) -> str:
        ex = self._extractor.extract_text("u", _fenced(prompt, "Text:\n"))
        ents = ex.entities[:15]
        names = {e.name for e in ents}
        rels = [
            {
                "source": r.source,
                "target": r.target,
                "description": "mentioned together",
                "strength": min(10, 3 + 2 * int(r.weight)),
            }
            for r in ex.relations
            if r.source in names and r.target in names
        ]
        return json.dumps(
            {
                "entities": [{"name": e.name, "type": e.type, "description": e.description[:80]} for e in ents],
                "relations": rels,
            }
        )

    def _summary(self, prompt: str) -> str:
        members = re.findall(r"^- ([^:\n]+):", _fenced(prompt, "Entities:\n"), re.M)
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
        title = ", ".join(members[:3]) or "A community"
        return json.dumps(
            {"title": title, "summary": f"This community is about {', '.join(members[:8])}. Note {digest}."}
        )

    def _gate(self, prompt: str) -> str:
        title_a, summary_a, title_b, summary_b = re.findall(
            re.escape(FENCE_OPEN) + r"\n(.*?)\n" + re.escape(FENCE_CLOSE), prompt, re.S
        )[:4]
        shared = (_words(title_a + " " + summary_a) & _words(title_b + " " + summary_b)) - {"community", "note"}
        return "yes - they share " + ", ".join(sorted(shared)[:3]) if len(shared) >= 2 else "no - unrelated"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if prompt.startswith("Extract the key entities"):
            stage, text = "extract", self._extract(prompt)
        elif "community of a knowledge graph" in prompt:
            stage, text = "summaries", self._summary(prompt)
        elif prompt.startswith("Two topics"):
            stage, text = "gates", self._gate(prompt)
        else:
            raise ValueError(f"unexpected prompt: {prompt[:80]!r}")
        self._calls[stage] += 1
        return CompletionResponse(text=text)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


def cr(index: CausalGraphIndex, ds: Any, examples: Sequence[Any]) -> Dict[str, float]:
    """Mean CR@512 / CR@1024 of ``index.as_retriever(similarity_top_k=10)`` over ``examples``."""
    retriever = index.as_retriever(similarity_top_k=10)
    sums = Counter()
    for ex in examples:
        m = score_question(retriever.retrieve(ex.question), ex, ds, BUDGETS)
        for b in BUDGETS:
            sums[b] += m[f"CR@{b}"]
    return {f"CR@{b}": sums[b] / len(examples) for b in BUDGETS}


def build(docs: List[Any], mode: str, embed: Any, cache: str) -> Tuple[CausalGraphIndex, Any]:
    llm = CountingScriptedLLM() if mode == "scripted" else None
    kwargs = {"llm": llm, "cache_dir": cache} if llm is not None else {}
    index = CausalGraphIndex.from_documents(docs, embed_model=embed, show_progress=False, **kwargs)
    return index, llm


def stage_calls(stats: Dict[str, Any]) -> Dict[str, int]:
    return {s: stats["cost"].get(s, {}).get("calls", 0) for s in STAGES}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True, help="the holisqa/biology folder")
    ap.add_argument("--mode", choices=("scripted", "offline"), default="scripted")
    ap.add_argument("--fraction", type=float, default=0.1, help="share of the articles inserted")
    ap.add_argument("--limit", type=int, default=None, help="use the first N articles only (a quick run)")
    ap.add_argument("--out", default=None, help="folder whose results.json gets this run under its mode")
    args = ap.parse_args()
    ds = load_dataset("holisqa", args.path)
    docs = list(ds.documents)[: args.limit]
    kept = {d.doc_id for d in docs}
    examples = [e for e in validate_examples(ds, drop_no_gold=True) if all(g.doc_id in kept for g in e.gold)]
    cut = len(docs) - max(1, round(len(docs) * args.fraction))
    embed = cached_default_embed_model()

    t0 = time.perf_counter()
    inc, inc_llm = build(docs[:cut], args.mode, embed, tempfile.mkdtemp(prefix="cg_inc_"))
    t_part = time.perf_counter() - t0
    part_calls = stage_calls(inc.build_stats)
    t0 = time.perf_counter()
    inc.insert(docs[cut:])
    t_insert = time.perf_counter() - t0
    ins_calls, upd = stage_calls(inc.build_stats), inc.build_stats["update"]
    t0 = time.perf_counter()
    full, full_llm = build(docs, args.mode, embed, tempfile.mkdtemp(prefix="cg_full_"))
    t_full = time.perf_counter() - t0
    full_calls = stage_calls(full.build_stats)

    print(
        f"mode {args.mode}: {cut} articles built + {len(docs) - cut} inserted = {len(docs)}; "
        f"{len(full.units)} units, {len(examples)} questions"
    )
    print(f"build of {cut} articles: {t_part:.0f} s, LLM calls {part_calls}")
    print(f"insert of {len(docs) - cut} articles: {t_insert:.0f} s, LLM calls {ins_calls} = {sum(ins_calls.values())}")
    print(f"full rebuild of {len(docs)} articles: {t_full:.0f} s, LLM calls {full_calls} = {sum(full_calls.values())}")
    if inc_llm is not None:
        print(f"scripted LLM's own count: build+insert {dict(inc_llm.calls)}, rebuild {dict(full_llm.calls)}")
    if sum(full_calls.values()):
        ratio = sum(ins_calls.values()) / sum(full_calls.values())
        print(f"insert / rebuild LLM calls: {ratio:.1%} (target <= 25%: {'met' if ratio <= 0.25 else 'missed'})")
    print(
        f"insert kept {upd['modules_kept']} modules, re-summarised {upd['modules_changed']}; judged "
        f"{upd['pairs_judged']} pairs, reused {upd['pairs_reused']} judgements"
    )
    print(f"graphs: insert {inc.graph.summary_stats()}")
    print(f"        rebuild {full.graph.summary_stats()}")
    a, b = cr(inc, ds, examples), cr(full, ds, examples)
    print("causalrag2 after insert: " + ", ".join(f"{k} {v:.2f}" for k, v in a.items()))
    print("causalrag2 full rebuild: " + ", ".join(f"{k} {v:.2f}" for k, v in b.items()))
    inserted = {d.doc_id for d in docs[cut:]}
    on_new = [e for e in examples if any(g.doc_id in inserted for g in e.gold)]
    if on_new:
        na, nb = cr(inc, ds, on_new), cr(full, ds, on_new)
        print(
            f"  the {len(on_new)} questions with gold in an inserted article: after insert "
            + ", ".join(f"{k} {v:.2f}" for k, v in na.items())
            + "; full rebuild "
            + ", ".join(f"{k} {v:.2f}" for k, v in nb.items())
        )
    gap = max(abs(a[k] - b[k]) for k in a)
    print(f"largest CR difference: {gap:.2f} points (target <= 1: {'met' if gap <= 1.0 else 'missed'})")
    if args.out:
        run = {
            "command": " ".join(["python", *(re.sub(r"^.*/datasets/", "$DATA/", a) for a in sys.argv)]),
            "n_built": cut,
            "n_inserted": len(docs) - cut,
            "n_questions": len(examples),
            "n_questions_on_inserted": len(on_new),
            "insert": {
                "seconds": t_insert,
                "llm_calls": ins_calls,
                "cr": a,
                "cr_on_inserted": na if on_new else None,
                "entities": len(inc.graph.entities),
                "modules_kept": upd["modules_kept"],
                "modules_changed": upd["modules_changed"],
                "pairs_judged": upd["pairs_judged"],
                "pairs_reused": upd["pairs_reused"],
            },
            "rebuild": {
                "seconds": t_full,
                "llm_calls": full_calls,
                "cr": b,
                "cr_on_inserted": nb if on_new else None,
                "entities": len(full.graph.entities),
            },
            "build_of_kept": {"seconds": t_part, "llm_calls": part_calls},
            # the file keeps the other mode's run from an earlier process: each run says where it came from
            "provenance": provenance_of(embed, inc_llm),
        }
        path = Path(args.out) / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        report = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"runs": {}}
        report["runs"][args.mode] = run
        write_results(path.parent, report, embed_model=embed, llm=inc_llm)


if __name__ == "__main__":
    main()
