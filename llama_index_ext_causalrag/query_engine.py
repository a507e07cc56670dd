"""One way every facade builds its ``RetrieverQueryEngine``, with the offline alternative logged."""

from __future__ import annotations

import inspect
import logging
from typing import Any, FrozenSet, List, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import Field
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.llms import LLM, MockLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_REFINE_PROMPT_SEL, DEFAULT_TEXT_QA_PROMPT_SEL
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers.no_text import NoText
from llama_index.core.response_synthesizers.refine import DEFAULT_RESPONSE_PADDING_SIZE, get_biggest_prompt
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.llm.resolve import resolve_llm
from llama_index_ext_causalrag.text.tokens import fit_to_budget

logger = logging.getLogger(__name__)

# what RetrieverQueryEngine.from_args takes besides the retriever and the LLM
QUERY_ENGINE_OPTIONS: FrozenSet[str] = frozenset(
    name
    for name, p in inspect.signature(RetrieverQueryEngine.from_args).parameters.items()
    if name not in ("cls", "retriever", "llm") and p.kind is not inspect.Parameter.VAR_KEYWORD
)

OFFLINE_ANSWER = "retrieval-only engine (response_mode='no_text': source nodes, no generated answer)"


def retriever_query_engine(
    retriever: BaseRetriever,
    llm: Optional[LLM] = None,
    step: str = "query engine",
    node_postprocessors: Optional[Sequence[BaseNodePostprocessor]] = None,
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
        unused = sorted(k for k in [*kwargs, *(["text_qa_template"] if text_qa_template is not None else [])])
        if unused:
            logger.warning("%s: no LLM, so the answer options %s are not used (retrieval only).", step, unused)
        # NoText never calls its LLM; MockLLM keeps it from resolving LlamaIndex's OpenAI default
        return RetrieverQueryEngine(
            retriever=retriever,
            response_synthesizer=NoText(llm=MockLLM()),
            node_postprocessors=list(node_postprocessors or ()),
        )
    if text_qa_template is not None:
        kwargs["text_qa_template"] = text_qa_template
    fit = ContextWindowFit(llm=resolved, text_qa_template=text_qa_template or DEFAULT_TEXT_QA_PROMPT_SEL)
    return RetrieverQueryEngine.from_args(
        retriever, llm=resolved, node_postprocessors=[*(node_postprocessors or ()), fit], **kwargs
    )


# each retry of the fit leaves this share of the room: PromptHelper's splitter cuts at spaces,
# and the tokens of the pieces add up to more than those of the whole text
_SHRINK = 0.9


class ContextWindowFit(BaseNodePostprocessor):
    """Keeps the retrieved nodes, in rank order, within what one answer prompt of the LLM holds.

    The room is what LlamaIndex's own ``PromptHelper`` leaves for context in the larger of the
    answer and refine prompts (context window less prompt and ``num_output``); whole nodes are
    kept while they fit, then the next one is cut
    (:func:`~llama_index_ext_causalrag.text.tokens.fit_to_budget`), and the room shrinks until
    compact mode packs the result into one chunk. So the engine answers in one call, without a
    refine step whose growing answer can leave no room (LlamaIndex's ``MockLLM`` echoes its
    prompt, so a refine step with it overflows).
    """

    llm: LLM = Field(description="The LLM that answers; its metadata gives the context window.")
    text_qa_template: BasePromptTemplate = Field(default=DEFAULT_TEXT_QA_PROMPT_SEL, description="The answer prompt.")
    refine_template: BasePromptTemplate = Field(default=DEFAULT_REFINE_PROMPT_SEL, description="The refine prompt.")

    @classmethod
    def class_name(cls) -> str:
        return "ContextWindowFit"

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        if not nodes:
            return []
        helper = PromptHelper.from_llm_metadata(self.llm.metadata)
        query = query_bundle.query_str if query_bundle is not None else ""
        # as compact mode packs: the larger prompt, the response padding
        prompt = get_biggest_prompt(
            [t.partial_format(query_str=query) for t in (self.text_qa_template, self.refine_template)]
        )
        padding = DEFAULT_RESPONSE_PADDING_SIZE
        try:
            room = helper.get_text_splitter_given_prompt(prompt, padding=padding, llm=self.llm).chunk_size
        except ValueError as e:
            raise ValueError(
                f"The LLM's context window ({helper.context_window} tokens) leaves no room for retrieved text "
                f"after the prompt and the answer ({helper.num_output} tokens): {e} Use an LLM with a larger "
                "context_window or a smaller num_output/max_tokens."
            ) from e
        fitted = nodes
        while room > 0:
            fitted = fit_to_budget(nodes, room)
            texts = [n.node.get_content(MetadataMode.LLM) for n in fitted]
            if len(helper.repack(prompt, texts, padding=padding, llm=self.llm)) <= 1:
                break
            room = int(room * _SHRINK)
        if len(fitted) < len(nodes) or fitted[-1] is not nodes[len(fitted) - 1]:
            logger.info(
                "Answer prompt: %d of %d retrieved node(s) fit the LLM's %d-token context window (%d tokens of text).",
                len(fitted),
                len(nodes),
                helper.context_window,
                room,
            )
        return fitted
