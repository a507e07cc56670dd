"""One way every facade builds its ``RetrieverQueryEngine``, with the offline alternative logged."""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import LLM, MockLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers.no_text import NoText

from llama_index_ext_causalrag.defaults import resolve_llm

logger = logging.getLogger(__name__)

OFFLINE_ANSWER = "retrieval-only engine (response_mode='no_text': source nodes, no generated answer)"


def retriever_query_engine(
    retriever: BaseRetriever,
    llm: Optional[LLM] = None,
    step: str = "query engine",
    node_postprocessors: Sequence[BaseNodePostprocessor] = (),
    text_qa_template: Optional[BasePromptTemplate] = None,
    **kwargs: Any,
) -> RetrieverQueryEngine:
    """``RetrieverQueryEngine.from_args`` with ``llm`` (or ``Settings.llm``).

    With no LLM configured it logs that and returns a retrieval-only engine: ``query()`` gives a
    response whose ``source_nodes`` are the retrieved nodes and whose text is empty. LlamaIndex's
    implicit OpenAI default is never triggered.
    """
    resolved = resolve_llm(llm, step, OFFLINE_ANSWER)
    if resolved is None:
        # NoText never calls its LLM; MockLLM keeps it from resolving LlamaIndex's OpenAI default
        return RetrieverQueryEngine(
            retriever=retriever,
            response_synthesizer=NoText(llm=MockLLM()),
            node_postprocessors=list(node_postprocessors),
        )
    if text_qa_template is not None:
        kwargs["text_qa_template"] = text_qa_template
    return RetrieverQueryEngine.from_args(
        retriever, llm=resolved, node_postprocessors=list(node_postprocessors), **kwargs
    )
