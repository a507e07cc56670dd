"""A LlamaIndex app over this package's index: a chat engine, an agent tool, an evaluation.

Everything here is LlamaIndex's own API, as its docs show apps use an index: ``as_chat_engine``
for a conversation, a ``QueryEngineTool`` over ``as_query_engine`` in a ``ReActAgent``, and a
``RetrieverEvaluator`` run (hit rate, MRR) over ``as_retriever``, with and without a token budget.
Offline by default: the packaged MiniLM embeds, and a small extractive stand-in plays the LLM
(it answers with the context sentence sharing the most words with the question, and drives the
agent through one tool call). With a local llama.cpp GGUF model (needs llama-cpp-python and
llama-index-llms-llama-cpp) the same app runs on a real LLM:

    python examples/llamaindex_app.py
    python examples/llamaindex_app.py --gguf qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any, List, Sequence

from llama_index.core import Document
from llama_index.core.agent.workflow import ReActAgent
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.evaluation import RetrieverEvaluator
from llama_index.core.llms import LLM, CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.tools import QueryEngineTool

from llama_index_ext_causalrag import MultiGranularityIndex
from llama_index_ext_causalrag.text.provenance import get_provenance

CORPUS = {
    "orchard-report": "In the third season, 18% of the stored northern-block Bramleys developed bitter pit. "
    "Soil tests showed a pH of 5.2, well below what the variety prefers. Low pH locks up calcium in the soil. "
    "Calcium deficiency in apples causes bitter pit, brown corky spots under the skin. The southern block, "
    "on soil with a pH of 6.3, lost under 2% of its fruit. The manager applied ground limestone to the "
    "northern block in the autumn. Pruning was done in February and the trees were thinned in June.",
    "cold-store-log": "The cold store holds apples at 3.5 degrees Celsius. In October the compressor failed for "
    "36 hours and the temperature rose to 9 degrees. Fruit from both blocks softened faster after the failure. "
    "Soft fruit bruises easily during grading. A new compressor was fitted in November.",
    "pest-survey": "Aphids were counted on twenty trees per block every week. Ladybird larvae eat aphids, and "
    "their numbers rose in July. Codling moth traps caught few moths this season. Scab lesions appeared after "
    "the wet May on the leaves of the oldest trees.",
}
SOURCES = {"orchard-report": "manager's report", "cold-store-log": "store log", "pest-survey": "field survey"}
# (question, a sentence of the corpus that answers it)
GOLD = [
    ("What causes bitter pit in apples?", "Calcium deficiency in apples causes bitter pit"),
    ("Why did the fruit soften in the cold store?", "the compressor failed for 36 hours"),
    ("What eats the aphids?", "Ladybird larvae eat aphids"),
]
WORD = re.compile(r"[a-z]{3,}")
STOP = {"the", "and", "what", "why", "did", "does", "was", "for", "with", "about", "from", "that", "this", "you"}


def _words(text: str) -> set:
    return {w.rstrip("s") for w in WORD.findall(text.lower()) if w not in STOP}


class ExtractiveLLM(CustomLLM):
    """Offline stand-in for an LLM. A ReAct prompt gets one call of the first tool, then the
    tool's answer as the final answer; any other prompt gets the sentence of its context sharing
    the most words with the question (the prompt's last line with a '?')."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="extractive-stand-in", context_window=4096, num_output=128)

    def _answer(self, prompt: str) -> str:
        questions = [line.split(":", 1)[-1].strip() for line in prompt.splitlines() if line.rstrip().endswith("?")]
        if "## Tools" in prompt:  # a ReAct agent's turn
            observed = prompt.split("## Current Conversation")[-1]
            if "Observation:" in observed:
                answer = observed.rsplit("Observation:", 1)[1].strip().splitlines()[0]
                return f"Thought: I can answer without using any more tools.\nAnswer: {answer}"
            tool = re.search(r"> Tool Name: (\S+)", prompt).group(1)
            return (
                f"Thought: I need to use a tool to help me answer the question.\nAction: {tool}\n"
                f"Action Input: {json.dumps({'input': questions[-1]})}"
            )
        if "standalone question" in prompt.lower():  # a condense step: the follow-up as it is
            return questions[-1]
        q = _words(questions[-1]) if questions else set()
        sentences = [
            s.strip()
            for line in prompt.splitlines()
            for s in re.split(r"(?<=[.!])\s+", line)
            if s.strip().endswith(".") and ":" not in s
        ]
        return max(sentences, key=lambda s: len(q & _words(s)), default="I do not know.")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self._answer(prompt)
        yield CompletionResponse(text=text, delta=text)


def local_llm(gguf: str, n_threads: int) -> LLM:  # pragma: no cover - needs llama-cpp-python
    from causalrag_bench.local_llm import chatml_llama_cpp

    return chatml_llama_cpp(gguf, n_threads, max_new_tokens=256)


def documents() -> List[Document]:
    # the source reaches the LLM with the text; the internal id stays out, as LlamaIndex's metadata rules say
    return [
        Document(
            id_=k,
            text=t,
            metadata={"source": SOURCES[k], "internal_id": f"doc-{i}"},
            excluded_llm_metadata_keys=["internal_id"],
        )
        for i, (k, t) in enumerate(CORPUS.items())
    ]


def chat(index: MultiGranularityIndex, llm: LLM) -> None:
    engine = index.as_chat_engine(
        chat_mode="condense_plus_context",
        llm=llm,
        similarity_top_k=3,
        budget_tokens=96,
        system_prompt="Answer from the orchard records.",
    )
    for message in ("What causes bitter pit in apples?", "And what did the manager do about it?"):
        response = engine.chat(message)
        print(f"chat> {message}\n  {str(response).strip()}")
        print("  sources:", sorted({n.node.ref_doc_id for n in response.source_nodes}))


def agent(index: MultiGranularityIndex, llm: LLM) -> None:
    tool = QueryEngineTool.from_defaults(
        index.as_query_engine(llm=llm, budget_tokens=128),
        name="orchard_records",
        description="Answers questions about the orchard's reports, store log and pest survey.",
    )
    print("tool call:", str(tool.call("What eats the aphids?")).strip())
    react = ReActAgent(tools=[tool], llm=llm)

    async def run() -> Any:
        return await react.run(user_msg="What happened when the compressor failed?")

    result = asyncio.run(run())
    print("agent:", str(result).strip())
    print("agent tool calls:", [c.tool_name for c in result.tool_calls])


def gold_ids(index: MultiGranularityIndex, sentence: str) -> List[str]:
    """The index nodes (units and parent windows) holding ``sentence``."""
    return [u.node_id for u in index.units if sentence in u.get_content()]


def evaluate(index: MultiGranularityIndex, budgets: Sequence[Any] = (None, 48)) -> None:
    """Hit rate and MRR of the retriever, whole and fitted to a budget: a fitted piece keeps the id
    of the node it was cut from, so the evaluator joins it to the gold."""
    for budget in budgets:
        retriever = index.as_retriever(similarity_top_k=3, budget_tokens=budget)
        evaluator = RetrieverEvaluator.from_metric_names(["hit_rate", "mrr"], retriever=retriever)
        results = [evaluator.evaluate(query=q, expected_ids=gold_ids(index, s)) for q, s in GOLD]
        means = {m: sum(r.metric_vals_dict[m] for r in results) / len(results) for m in ("hit_rate", "mrr")}
        pieces = sum("cut" in get_provenance(n) for q, _ in GOLD for n in retriever.retrieve(q))
        print(
            f"RetrieverEvaluator budget_tokens={budget}: hit_rate {means['hit_rate']:.2f}, "
            f"mrr {means['mrr']:.2f} ({pieces} fitted pieces)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=None, help="local llama.cpp model instead of the offline stand-in")
    ap.add_argument("--n-threads", type=int, default=1)
    args = ap.parse_args()
    llm = local_llm(args.gguf, args.n_threads) if args.gguf else ExtractiveLLM()
    index = MultiGranularityIndex.from_documents(documents())
    chat(index, llm)
    agent(index, llm)
    evaluate(index)


if __name__ == "__main__":
    main()
