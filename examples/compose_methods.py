"""Two of the package's methods in one LlamaIndex RetrieverQueryEngine, offline, no API key.

HCQR plans three queries from the question and its answer options (support, distinguish, key
features) and runs each, with the question and its options as a fourth list, against the UMGP
retriever (multi-granularity fusion + budget-aware parent promotion); the fused nodes then pass
CausalRAG2's causal filter as a node postprocessor.
Without an LLM every step uses its offline alternative (logged): the retrieval-based planner, the
cue-word causal filter, and a retrieval-only response.

    python examples/compose_methods.py
"""

from __future__ import annotations

import time

from llama_index.core import Document
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers.no_text import NoText
from quickstart import CORPUS

from llama_index_ext_causalrag import (
    CausalFilterPostprocessor,
    HypothesisRetriever,
    MultiGranularityIndex,
    default_embed_model,
    get_provenance,
)

QUESTION = "What caused the bitter pit in the northern block?"
OPTIONS = {"A": "the cold store failure", "B": "low soil pH", "C": "codling moth", "D": "falling market prices"}


def main() -> None:
    t0 = time.perf_counter()
    docs = [Document(id_=k, text=v) for k, v in CORPUS.items()]
    index = MultiGranularityIndex.from_documents(docs, embed_model=default_embed_model())
    umgp = index.as_retriever(similarity_top_k=4, budget_tokens=160)
    # the offline planner scores "question + option" with cosine scores of the 2-sentence windows
    hcqr = HypothesisRetriever.from_defaults(umgp, scoring_retriever=index.dense[2], budget_tokens=256, options=OPTIONS)
    engine = RetrieverQueryEngine(
        retriever=hcqr,
        response_synthesizer=NoText(llm=MockLLM()),  # retrieval only; pass llm= for an answer
        node_postprocessors=[CausalFilterPostprocessor()],
    )
    plan = hcqr.plan(QUESTION)
    print(f"Question: {QUESTION}\nOptions: {OPTIONS}")
    print(f"Working answer (offline planner): {plan.hypothesis.get('working_answer')}")
    for role, q in plan.queries.items():
        print(f"  {role:13s} query: {q}")
    print(f"  {'original':13s} query: {HypothesisRetriever.original_query(plan)!r}")
    response = engine.query(QUESTION)
    print("\nContext after HCQR over UMGP, then the causal filter:")
    for rank, n in enumerate(response.source_nodes, start=1):
        prov = get_provenance(n)
        print(
            f"{rank}. [{n.node.ref_doc_id}] found by {prov.get('found_by')} "
            f"filter={prov.get('filter', {}).get('mode')}: {' '.join(n.node.get_content().split())}"
        )
    print(f"\ndone in {time.perf_counter() - t0:.1f} s, offline, no LLM")


if __name__ == "__main__":
    main()
