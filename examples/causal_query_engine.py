"""CausalRAG2 in a RetrieverQueryEngine: gated retrieval, causal filter, spurious-aware prompt.

Offline (no LLM): builds a small index with the offline extractor, retrieves, filters with the
offline causal-path rule, prints each node's provenance and the exact prompt the generator
would get, and SKIPS answer synthesis (a ``NoText`` synthesizer; its MockLLM is never called).
With a local llama.cpp GGUF model (needs llama-cpp-python and llama-index-llms-llama-cpp), the
same engine also filters with the LLM and writes the answer:

    python examples/causal_query_engine.py
    python examples/causal_query_engine.py --gguf qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    python examples/causal_query_engine.py --path $DATA/holisqa/biology --limit 30 \
        --question "How does drought affect plant growth?"
"""

from __future__ import annotations

import argparse
import logging

from llama_index.core import Document
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import get_response_synthesizer
from llama_index.core.response_synthesizers.no_text import NoText
from llama_index.core.schema import MetadataMode

from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_CAUSAL_QA_PROMPT
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever
from llama_index_ext_causalrag.text.provenance import get_provenance

CORPUS = [
    "Drought stress reduces crop yield in maize. Crop yield depends on soil moisture. Irrigation increases "
    "soil moisture and protects root growth. Heat waves cause drought stress.",
    "Fertilizer prices rose sharply last year. High fertilizer prices lead to lower farm income. "
    "Farm income drives rural investment, which results in new irrigation projects.",
    "Bank interest rates affect farm income. Central bank policy raises interest rates. "
    "The old bank building in the village has a red roof and attracts tourists.",
    "Maize is a popular crop in the region. The region hosts a maize festival every summer, "
    "where farmers compare the yield of new maize varieties.",
]


def local_llm(gguf: str, n_threads: int):  # pragma: no cover - needs llama-cpp-python
    from causalrag_bench.local_llm import chatml_llama_cpp

    return chatml_llama_cpp(gguf, n_threads, max_new_tokens=256)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--question", default="Why could farm income fall, and what does that do to irrigation?")
    ap.add_argument("--path", default=None, help="a HolisQA domain folder instead of the built-in corpus")
    ap.add_argument("--limit", type=int, default=30, help="first N articles of --path")
    ap.add_argument("--gguf", default=None, help="local llama.cpp model: LLM filter + answer")
    ap.add_argument("--n-threads", type=int, default=1)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.path:
        from causalrag_bench.loaders import load_dataset  # pip install -e ./benchmarks

        docs = load_dataset("holisqa", args.path).documents[: args.limit]
        index = CausalGraphIndex.from_documents(docs, show_progress=False)
    else:
        docs = [Document(text=t, doc_id=f"doc{i}") for i, t in enumerate(CORPUS)]
        index = CausalGraphIndex.from_documents(docs, show_progress=False, chunk_size=48, min_entity_units=1)
    print("index:", index.graph.summary_stats())

    llm = local_llm(args.gguf, args.n_threads) if args.gguf else None
    retriever = GatedExpansionRetriever(index, similarity_top_k=8)
    causal_filter = CausalFilterPostprocessor(llm=llm, top_seeds=2)
    if llm is not None:
        synth = get_response_synthesizer(llm=llm, text_qa_template=DEFAULT_CAUSAL_QA_PROMPT, response_mode="compact")
    else:  # NoText never calls its LLM; the MockLLM only keeps LlamaIndex from resolving OpenAI
        synth = NoText(llm=MockLLM())
    engine = RetrieverQueryEngine(retriever=retriever, node_postprocessors=[causal_filter], response_synthesizer=synth)

    response = engine.query(args.question)
    print(f"\nQ: {args.question}")
    for n in response.source_nodes:
        p = get_provenance(n)
        path = " -> ".join(p.get("path_names") or []) or "(text match)"
        print(
            f"  {n.score:.3f} [{p['filter']['reason']}] via {p.get('via')} path: {path} "
            f"edges: {p.get('edge_types')}\n      {n.node.get_content()[:110]!r}"
        )
    if llm is None:
        context = "\n\n".join(n.node.get_content(metadata_mode=MetadataMode.LLM) for n in response.source_nodes)
        print("\nNo LLM configured: answer synthesis skipped. The generator would receive:\n")
        print(DEFAULT_CAUSAL_QA_PROMPT.format(context_str=context, query_str=args.question))
    else:
        print(f"\nA: {response}\nfilter: {causal_filter.stats}")


if __name__ == "__main__":
    main()
