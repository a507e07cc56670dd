"""The facades' shared verbs, written once: the same call means the same thing on every index.

Every facade (:class:`MultiGranularityIndex`, :class:`StandardsIndex`, :class:`CausalGraphIndex`)
derives from :class:`IndexContract`. What it fixes, after LlamaIndex's ``BaseIndex``:

* ``as_retriever(**retriever_options)``: keyword arguments only; a name the retriever does not
  take is a ``TypeError`` naming it (never silently ignored).
* ``as_query_engine(llm=None, **options)``: each option goes where it belongs, the retriever's to
  :meth:`as_retriever`, LlamaIndex's query-engine options (``streaming``, ``response_mode``,
  ``text_qa_template``, ``node_postprocessors``, ...) to ``RetrieverQueryEngine.from_args``; a name
  neither takes is a ``TypeError`` naming it.
* ``as_chat_engine(chat_mode="best", llm=None, **options)``: LlamaIndex's chat engines over
  :meth:`as_retriever` / :meth:`as_query_engine`, options routed the same way
  (:mod:`llama_index_ext_causalrag.chat_engine`); with no LLM a ``ValueError`` naming the fix.
* ``from_documents(documents, *, storage_context=None, show_progress=False, ...)``; a
  ``vector_store=`` keyword (a ``VectorStoreIndex`` habit) is refused with the ``StorageContext``
  to pass instead.
* ``insert(document, **insert_kwargs)``, ``delete_ref_doc(ref_doc_id, delete_from_docstore=False,
  **delete_kwargs)``, ``refresh_ref_docs(documents, **update_kwargs) -> List[bool]`` with
  LlamaIndex's signatures; the keyword arguments an index does not take are refused by name.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Collection, Dict, FrozenSet, Mapping, Optional, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import LLM
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_ext_causalrag.query_engine import QUERY_ENGINE_OPTIONS, retriever_query_engine
from llama_index_ext_causalrag.validation import public_method, unexpected_keyword

if TYPE_CHECKING:
    from llama_index.core.chat_engine.types import BaseChatEngine, ChatMode

logger = logging.getLogger(__name__)
__all__ = ["IndexContract", "QUERY_ENGINE_OPTIONS", "split_query_engine_options", "unexpected_keyword"]


def split_query_engine_options(
    options: Mapping[str, Any], retriever_options: Collection[str]
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(retriever options, query-engine options)`` of ``options``; a name neither takes is a
    ``TypeError`` naming it."""
    to_retriever: Dict[str, Any] = {}
    to_engine: Dict[str, Any] = {}
    for name, value in options.items():
        if name in retriever_options:
            to_retriever[name] = value
        elif name in QUERY_ENGINE_OPTIONS:
            to_engine[name] = value
        else:
            raise unexpected_keyword(name, set(retriever_options) | QUERY_ENGINE_OPTIONS)
    return to_retriever, to_engine


class IndexContract:
    """The verbs every facade shares; a facade supplies :meth:`as_retriever` and names its options.

    Subclasses set :attr:`RETRIEVER_OPTIONS` (every keyword :meth:`as_retriever` takes, its config
    fields included) and may override :meth:`_query_engine_retriever` (e.g. to hand the LLM to
    an LLM step of retrieval) and :meth:`_query_engine_defaults` (e.g. a method's answer prompt).
    """

    RETRIEVER_OPTIONS: FrozenSet[str] = frozenset()

    def as_retriever(self, **retriever_options: Any) -> BaseRetriever:  # pragma: no cover - abstract
        raise NotImplementedError

    def _retriever_options(self) -> FrozenSet[str]:
        return self.RETRIEVER_OPTIONS

    def _query_engine_retriever(self, llm: Optional[LLM], **retriever_options: Any) -> BaseRetriever:
        return self.as_retriever(**retriever_options)

    def _query_engine_defaults(self) -> Dict[str, Any]:
        return {}

    @public_method
    def as_query_engine(self, llm: Optional[LLM] = None, **options: Any) -> RetrieverQueryEngine:
        """A ``RetrieverQueryEngine`` over :meth:`as_retriever`: retriever options (e.g.
        ``budget_tokens=1024``) go to the retriever, LlamaIndex's query-engine options
        (``streaming=True``, ``response_mode="tree_summarize"``, ``text_qa_template=...``,
        ``node_postprocessors=[...]``) to ``RetrieverQueryEngine.from_args``. With no LLM
        (``llm=None`` and ``Settings.llm`` unset) the engine returns the retrieved nodes only."""
        to_retriever, to_engine = split_query_engine_options(options, self._retriever_options())
        engine_options = {**self._query_engine_defaults(), **to_engine}
        retriever = self._query_engine_retriever(llm, **to_retriever)
        return retriever_query_engine(retriever, llm=llm, step=type(self).__name__, **engine_options)

    @public_method
    def as_chat_engine(
        self, chat_mode: "ChatMode | str" = "best", llm: Optional[LLM] = None, **options: Any
    ) -> "BaseChatEngine":
        """A LlamaIndex chat engine over this index, as ``BaseIndex.as_chat_engine`` makes one.

        ``chat_mode``: ``"context"`` (``ContextChatEngine`` over :meth:`as_retriever`),
        ``"condense_plus_context"`` (``CondensePlusContextChatEngine``), ``"condense_question"``
        (``CondenseQuestionChatEngine`` over :meth:`as_query_engine`), ``"simple"`` (the LLM
        alone) or ``"best"`` (default; ``condense_plus_context``, as in LlamaIndex 0.14).
        ``options``: the retriever's go to :meth:`as_retriever` (e.g. ``budget_tokens=512``), the
        chat engine's (``memory``, ``system_prompt``, ``node_postprocessors``, ``context_prompt``,
        ...) to its ``from_defaults``, with ``condense_question`` the query engine's to
        :meth:`as_query_engine`; any other name is a ``TypeError`` naming it. Every reply is the
        LLM's: with no LLM (``llm=None`` and ``Settings.llm`` unset) this is a ``ValueError``
        naming the fix (``as_query_engine()`` answers with the retrieved nodes alone)."""
        from llama_index_ext_causalrag.chat_engine import build_chat_engine

        def query_engine(llm: LLM, **query_options: Any) -> RetrieverQueryEngine:
            return self.as_query_engine(llm=llm, **query_options)

        return build_chat_engine(
            chat_mode, llm, options, self._retriever_options(), self._query_engine_retriever, query_engine
        )
