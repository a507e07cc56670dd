"""Quickstart: offline, no API key. Indexes a small corpus written for this example, then
compares a plain LlamaIndex vector retriever with UMGP-RAG (multi-granularity entropy fusion
plus parent promotion) at the same token budget, and prints where each node came from.

    pip install torch==2.13.0 -e ".[local]" && python examples/quickstart.py
"""

from __future__ import annotations

import logging
import time

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter

from llama_index_ext_causalrag import default_embed_model, get_provenance
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.tokens import count_tokens

logging.basicConfig(level=logging.WARNING)

CORPUS = {
    "orchard-report": """Orchard Report, Season 3.
The northern block was planted with Bramley apples in the first season. Irrigation came from a
shallow well that dried out in late summer. Growers noticed leaf scorch on the upper branches
during the August heat wave. Soil tests showed a pH of 5.2, well below the 6.0 to 6.5 the
variety prefers. Low pH locks up calcium in the soil. Calcium deficiency in apples causes bitter
pit, a disorder that leaves brown, corky spots under the skin. In the third season, 18% of the
stored Bramleys developed bitter pit after two months in the cold store. The southern block, on
limed soil with a pH of 6.3, lost under 2% of its fruit to the disorder. The orchard manager
therefore applied ground limestone at 4 t/ha to the northern block in the autumn.""",
    "cold-store-log": """Cold Store Log.
The cold store holds apples at 3.5 degrees Celsius and 92% relative humidity. In October the
compressor failed for 36 hours and the temperature rose to 9 degrees. Fruit from both blocks
softened faster after the failure. Soft fruit bruises easily during grading. The store was
re-certified in November after the compressor was replaced. Bitter pit is not caused by storage
temperature, but it shows up during storage, which is why it is often blamed on the store.""",
    "pest-notes": """Pest Notes.
Codling moth larvae tunnel into the core of the fruit. Pheromone traps in the northern block
caught 40 moths per week in July, against a threshold of 10. A granulosis virus spray cut the
catch to 6 per week by mid-August. Woolly aphids formed colonies on pruning wounds in the
southern block; their natural enemy, a parasitic wasp, was released in May. Neither pest causes
bitter pit, although moth damage is sometimes mistaken for it at grading.""",
    "market-summary": """Market Summary.
Bramley prices fell 12% after a large national harvest. Buyers downgraded lots with more than
5% blemished fruit. The co-operative rejected two northern-block lots for bitter pit, which cost
the orchard about 8,400 pounds. Dessert varieties such as Gala held their price because demand
from supermarkets stayed firm.""",
}

QUESTION = "Why did so many northern-block Bramleys get bitter pit, and what was done about it?"
BUDGET = 160  # tokens of context handed to the generator


def show(title: str, nodes, budget: int) -> None:
    print(f"\n== {title} (first {budget} tokens of context)")
    used = 0
    for rank, n in enumerate(nodes, start=1):
        text = n.node.get_content()
        used += count_tokens(text)
        prov = get_provenance(n)
        where = {k: prov[k] for k in ("expert", "scores", "granularity", "promoted_from", "P", "R") if k in prov}
        print(f"{rank}. [{n.node.ref_doc_id}] score={n.score:.3f} {text[:90]!r}...")
        if where:
            print(f"   provenance: {where}")
        if used >= budget:
            break


def main() -> None:
    t0 = time.perf_counter()
    docs = [Document(id_=k, text=v) for k, v in CORPUS.items()]
    embed = default_embed_model()  # all-MiniLM-L6-v2 from the packaged weights, offline

    chunks = SentenceSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(docs)
    plain = VectorStoreIndex(chunks, embed_model=embed).as_retriever(similarity_top_k=4)
    show("LlamaIndex VectorStoreIndex, 64-token chunks", plain.retrieve(QUESTION), BUDGET)

    index = MultiGranularityIndex.from_documents(docs, embed_model=embed, granularities=(2, 4, 8))
    retriever = index.as_retriever(similarity_top_k=30)
    promote = index.as_postprocessor(top_n=4, budget_tokens=BUDGET)
    nodes = promote.postprocess_nodes(retriever.retrieve(QUESTION))
    show("UMGP-RAG: entropy fusion of dense+BM25 over 2/4/8-sentence windows, parent promotion", nodes, BUDGET)
    print(f"\ndone in {time.perf_counter() - t0:.1f}s, offline, no LLM")


if __name__ == "__main__":
    main()
