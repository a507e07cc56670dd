"""One way every facade builds its chat engine: LlamaIndex's chat engines over our retrievers.

The modes are those of LlamaIndex's ``BaseIndex.as_chat_engine`` that apply to an index that
retrieves (the agent modes ``react`` and ``openai`` are refused there too, with the agent to use):

* ``context``: ``ContextChatEngine`` over :meth:`as_retriever`;
* ``condense_plus_context``: ``CondensePlusContextChatEngine`` over :meth:`as_retriever`;
* ``condense_question``: ``CondenseQuestionChatEngine`` over :meth:`as_query_engine`;
* ``simple``: ``SimpleChatEngine`` (the LLM alone, no retrieval);
* ``best`` (the default): what LlamaIndex 0.14 makes of it, ``condense_plus_context``.

A chat engine's every reply is the LLM's, so there is no offline alternative: with no LLM
(``llm=None`` and ``Settings.llm`` unset) it is a ``ValueError`` naming the fix, never
LlamaIndex's implicit OpenAI default.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, FrozenSet, Mapping, Optional, Tuple, Type

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    CondenseQuestionChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.chat_engine.types import BaseChatEngine, ChatMode
from llama_index.core.llms import LLM
from llama_index.core.settings import Settings

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.query_engine import QUERY_ENGINE_OPTIONS
from llama_index_ext_causalrag.validation import caller, unexpected_keyword

BEST_MODE = ChatMode.CONDENSE_PLUS_CONTEXT  # LlamaIndex 0.14's BaseIndex.as_chat_engine: best -> this
ENGINES: Dict[ChatMode, Type[BaseChatEngine]] = {
    ChatMode.CONTEXT: ContextChatEngine,
    ChatMode.CONDENSE_PLUS_CONTEXT: CondensePlusContextChatEngine,
    ChatMode.CONDENSE_QUESTION: CondenseQuestionChatEngine,
    ChatMode.SIMPLE: SimpleChatEngine,
}
CHAT_MODES: Tuple[str, ...] = (ChatMode.BEST.value, *(m.value for m in ENGINES))
# what each engine's from_defaults takes by name, besides its retriever / query engine and LLM
_TAKEN_BY_US = ("cls", "retriever", "query_engine", "llm")


def engine_options(engine: Type[BaseChatEngine]) -> FrozenSet[str]:
    """The named parameters of ``engine.from_defaults`` a caller may pass (``memory``,
    ``system_prompt``, ``node_postprocessors``, ...)."""
    params = inspect.signature(engine.from_defaults).parameters.items()
    return frozenset(n for n, p in params if n not in _TAKEN_BY_US and p.kind is not inspect.Parameter.VAR_KEYWORD)


def resolve_chat_mode(chat_mode: "ChatMode | str") -> ChatMode:
    """``chat_mode`` as a :class:`ChatMode` with ``best`` resolved; an agent mode or an unknown
    value is a ``ValueError`` naming it and what to use."""
    value = chat_mode.value if isinstance(chat_mode, ChatMode) else chat_mode
    if value in (ChatMode.REACT.value, ChatMode.OPENAI.value):
        raise ValueError(
            f"{caller()}(chat_mode={value!r}): LlamaIndex removed the agent chat modes; build an "
            "agent instead, e.g. FunctionAgent or ReActAgent (llama_index.core.agent.workflow) with "
            "tools=[QueryEngineTool.from_defaults(index.as_query_engine(llm=llm), name=..., description=...)]."
        )
    check_choice(value, "chat_mode", CHAT_MODES)
    mode = ChatMode(value)
    return BEST_MODE if mode is ChatMode.BEST else mode


def require_llm(mode: ChatMode, llm: Optional[LLM]) -> LLM:
    """``llm``, else ``Settings.llm`` if the user set one; else a ``ValueError`` naming the fix."""
    if llm is not None:
        return llm
    configured = getattr(Settings, "_llm", None)  # never LlamaIndex's implicit OpenAI default
    if configured is not None:
        return configured
    raise ValueError(
        f"{caller()}(chat_mode={mode.value!r}) needs an LLM (every reply is the LLM's) and none is "
        "configured: pass llm=... or set Settings.llm. Without an LLM, use as_retriever() for the nodes or "
        "as_query_engine() (retrieval only, no generated answer)."
    )


def split_chat_options(
    mode: ChatMode, options: Mapping[str, Any], retriever_options: FrozenSet[str]
) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """``(retriever options, query-engine options, chat-engine options)`` of ``options`` for
    ``mode``; a name none of them takes is a ``TypeError`` naming it and the names allowed."""
    chat = engine_options(ENGINES[mode])
    retrieves = mode is not ChatMode.SIMPLE
    query = QUERY_ENGINE_OPTIONS if mode is ChatMode.CONDENSE_QUESTION else frozenset()
    out: Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]] = ({}, {}, {})
    for name, value in options.items():
        if name in chat:  # e.g. node_postprocessors: the chat engine's own, where it takes them
            out[2][name] = value
        elif retrieves and name in retriever_options:
            out[0][name] = value
        elif name in query:
            out[1][name] = value
        else:
            allowed = chat | query | (retriever_options if retrieves else frozenset())
            raise unexpected_keyword(name, allowed, call=f"{caller()}(chat_mode={mode.value!r})")
    return out


def build_chat_engine(
    chat_mode: "ChatMode | str",
    llm: Optional[LLM],
    options: Mapping[str, Any],
    retriever_options: FrozenSet[str],
    make_retriever: Callable[..., BaseRetriever],
    make_query_engine: Callable[..., Any],
) -> BaseChatEngine:
    """The chat engine of ``chat_mode`` with ``options`` routed (see the module docstring).

    ``make_retriever(llm, **retriever_options)`` and ``make_query_engine(llm, **options)`` are the
    facade's; the LLM is resolved (or refused) before anything is built."""
    mode = resolve_chat_mode(chat_mode)
    to_retriever, to_query, to_chat = split_chat_options(mode, options, retriever_options)
    resolved = require_llm(mode, llm)
    engine = ENGINES[mode]
    if mode is ChatMode.SIMPLE:
        return engine.from_defaults(llm=resolved, **to_chat)
    if mode is ChatMode.CONDENSE_QUESTION:
        query_engine = make_query_engine(resolved, **to_retriever, **to_query)
        return engine.from_defaults(query_engine=query_engine, llm=resolved, **to_chat)
    return engine.from_defaults(retriever=make_retriever(resolved, **to_retriever), llm=resolved, **to_chat)
