"""Quickstart: offline, no API key, under 30 s on 2 CPU cores.

Indexes a small corpus written for this example twice, with a plain LlamaIndex
``VectorStoreIndex`` and with this package's ``MultiGranularityIndex`` (UMGP: multi-granularity
dense + BM25 fusion, then parent promotion fitted to the token budget), asks one question, and
prints both contexts at the same token budget with the gold sentences each one covers.

    pip install torch==2.13.0 -e ".[local]" && python examples/quickstart.py
"""

from __future__ import annotations

import time
from typing import List

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.schema import NodeWithScore

from llama_index_ext_causalrag import MultiGranularityIndex, default_embed_model
from llama_index_ext_causalrag.text.tokens import count_tokens, truncate_to_tokens

CORPUS = {
    "orchard-report": """Orchard Report, Season 3.
The orchard was founded in 1962 on a south-facing slope above the river. It has two blocks of
about eleven hectares each, separated by a farm track and a line of poplars planted as a
windbreak. Four permanent staff work there, with twelve pickers hired every September. The
northern block was planted with Bramley apples in the first season. Irrigation came from a
shallow well that dried out in late summer. Growers noticed leaf scorch on the upper branches
during the August heat wave. Pruning was done in February, as every year, and the trees were
thinned by hand in June. In the third season, 18% of the stored northern-block Bramleys developed
bitter pit after two months in the cold store. Soil tests showed a pH of 5.2, well below the
6.0 to 6.5 the variety prefers. Low pH locks up calcium in the soil. Calcium deficiency in apples
causes bitter pit, a disorder that leaves brown, corky spots under the skin. The southern block,
on soil with a pH of 6.3, lost under 2% of its fruit to the disorder. The orchard manager
therefore applied ground limestone at 4 t/ha to the northern block in the autumn.""",
    "cold-store-log": """Cold Store Log.
The cold store holds apples at 3.5 degrees Celsius and 92% relative humidity. In October the
compressor failed for 36 hours and the temperature rose to 9 degrees. Fruit from both blocks
softened faster after the failure. Soft fruit bruises easily during grading. The store was
re-certified in November after the compressor was replaced. Storage temperature does not cause
bitter pit, but the disorder shows up during storage, which is why it is often blamed on the store.""",
    "pest-notes": """Pest Notes.
Codling moth larvae tunnel into the core of the fruit. Pheromone traps in the northern block
caught 40 moths per week in July, against a threshold of 10. A granulosis virus spray cut the
catch to 6 per week by mid-August. Woolly aphids formed colonies on pruning wounds in the
southern block; their natural enemy, a parasitic wasp, was released in May. Moth damage is
sometimes mistaken for bitter pit at grading.""",
    "market-summary": """Market Summary.
Bramley prices fell 12% after a large national harvest. Buyers downgraded lots with more than
5% blemished fruit, and the co-operative rejected two lots from the orchard, which cost about
8,400 pounds. Dessert varieties such as Gala held their price because demand from supermarkets
stayed firm.""",
}

QUESTION = "What caused bitter pit in the northern-block Bramleys, and what did the orchard manager do about it?"
BUDGET = 128  # tokens of context handed to the generator
GOLD = {  # the sentences that answer the question: the cause chain and the remedy
    "cause: soil pH": "Soil tests showed a pH of 5.2",
    "cause: calcium locked up": "Low pH locks up calcium in the soil.",
    "cause: calcium deficiency -> bitter pit": "Calcium deficiency in apples causes bitter",
    "remedy: limestone": "applied ground limestone at 4 t/ha",
}


def context(nodes: List[NodeWithScore], budget: int) -> str:
    """The text a generator would see: nodes in rank order, cut at ``budget`` tokens."""
    parts, left = [], budget
    for n in nodes:
        text = " ".join(n.node.get_content().split())
        piece = truncate_to_tokens(text, left)
        if count_tokens(piece) < 8 and parts:  # a few words of a cut-off node help nobody
            break
        parts.append(f"[{n.node.ref_doc_id}] {piece}")
        left -= count_tokens(piece)
        if left <= 0:
            break
    return "\n".join(parts)


def report(title: str, ctx: str) -> int:
    flat = " ".join(ctx.split())
    found = [k for k, s in GOLD.items() if s in flat]
    print(f"\n== {title}\n{ctx}")
    for k in GOLD:
        print(f"   {'FOUND  ' if k in found else 'missing'}  {k}")
    return len(found)


def main() -> None:
    t0 = time.perf_counter()
    docs = [Document(id_=k, text=v) for k, v in CORPUS.items()]
    embed = default_embed_model()  # all-MiniLM-L6-v2 from the packaged weights, offline
    print(f"Question: {QUESTION}\nBudget: {BUDGET} tokens of context")

    plain = VectorStoreIndex.from_documents(docs, embed_model=embed).as_retriever(similarity_top_k=4)
    n_plain = report("LlamaIndex VectorStoreIndex (default chunking)", context(plain.retrieve(QUESTION), BUDGET))

    umgp = MultiGranularityIndex.from_documents(docs, embed_model=embed).as_retriever(budget_tokens=BUDGET)
    n_umgp = report("MultiGranularityIndex (UMGP, the default preset)", context(umgp.retrieve(QUESTION), BUDGET))

    print(f"\ngold sentences covered: VectorStoreIndex {n_plain}/{len(GOLD)}, UMGP {n_umgp}/{len(GOLD)}")
    print(f"done in {time.perf_counter() - t0:.1f} s, offline, no LLM")


if __name__ == "__main__":
    main()
