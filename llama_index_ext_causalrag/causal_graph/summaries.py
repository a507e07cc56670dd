"""Module summaries: an LLM title + 2-4 sentences, or an extractive offline summary.

The index calls summarisers finest level first, so a module's prompt can list the titles
of its children.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Module
from llama_index_ext_causalrag.causal_graph.keyphrases import short
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_SUMMARY_PROMPT
from llama_index_ext_causalrag.llm.cache import LLMCache, StageCost
from llama_index_ext_causalrag.llm.io import LLMBudget, LLMRequest, LLMRunner, RetryPolicy, fence
from llama_index_ext_causalrag.llm.parse import parse_json_answer

logger = logging.getLogger(__name__)

MAX_SENTENCES_PER_ENTITY = 200


@dataclass
class SummaryContext:
    """What summarisers may read: the graph, the corpus sentences and who mentions what."""

    graph: CausalGraph
    sentences: List[str]
    sentence_entities: List[Set[str]]
    entity_sentences: Dict[str, List[int]]
    internal_degree: Dict[int, Dict[str, float]] = field(default_factory=dict)  # level -> eid -> w

    def central_members(self, module: Module, k: int) -> List[str]:
        deg = self.internal_degree.get(module.level, {})
        ents = self.graph.entities
        return sorted(module.members, key=lambda e: (-deg.get(e, 0.0), -len(ents[e].unit_ids), ents[e].name))[:k]

    def representative_sentences(self, module: Module, k: int, pool: int = 10) -> List[str]:
        members = set(module.members)
        cand: Set[int] = set()
        for e in self.central_members(module, pool):
            cand.update(self.entity_sentences.get(e, [])[:MAX_SENTENCES_PER_ENTITY])
        scored = sorted(cand, key=lambda s: (-len(self.sentence_entities[s] & members), s))
        out: List[str] = []
        for s in scored:
            text = short(self.sentences[s])
            if text not in out:
                out.append(text)
            if len(out) == k:
                break
        return out


class ExtractiveSummarizer:
    """Title = the three most central entities; summary = the sentences mentioning most members."""

    name = "extractive"

    def __init__(self, num_sentences: int = 3) -> None:
        if not 1 <= num_sentences <= 4:
            raise ValueError(f"num_sentences must be in [1, 4], got {num_sentences!r}.")
        self.num_sentences = num_sentences

    def summarize(self, module: Module, ctx: SummaryContext, cost: StageCost) -> Tuple[str, str]:
        names = [ctx.graph.entities[e].name for e in ctx.central_members(module, 3)]
        title = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1] if names else module.id
        sents = ctx.representative_sentences(module, self.num_sentences)
        summary = " ".join(sents) if sents else "Entities: " + ", ".join(names) + "."
        return title, summary


def parse_summary(text: str) -> Tuple[str, str]:
    """``(title, summary)`` from ``{"title": "...", "summary": "..."}``; ``ValueError`` when either
    is missing, empty or not a string (a nested object, a list, null)."""
    obj, _ = parse_json_answer(text, {"title", "summary"})
    title, summary = obj.get("title"), obj.get("summary")
    if not isinstance(title, str) or not isinstance(summary, str):
        raise ValueError(
            f"summary JSON needs string 'title' and 'summary', got "
            f"{type(title).__name__} and {type(summary).__name__}: {text[:120]!r}"
        )
    title, summary = title.strip(), summary.strip()
    if not title or not summary:
        raise ValueError("empty title or summary")
    return title, summary


class LLMSummarizer(PromptMixin):
    """Title and 2-4 sentences from the LLM (members with descriptions, top relations, child titles).

    Malformed output (not JSON, or a title/summary that is not a non-empty string) is retried
    once, then the module gets the extractive summary and a warning. Answers are cached through
    the LLM layer like the extractor's. A module with fewer than ``min_members`` entities
    (default: a single entity) costs no call: its title is the entity's name and its summary the
    entity's description plus its most representative sentence. The modules of one level are
    summarised concurrently (``num_workers``), finest level first.
    """

    name = "llm"

    def __init__(
        self,
        llm: LLM,
        summary_prompt: Optional[Union[str, PromptTemplate]] = None,
        max_members: int = 30,
        max_relations: int = 20,
        cache_dir: Optional[str] = None,
        min_members: int = 2,
        num_workers: Optional[int] = None,
        retry_policy: Optional[RetryPolicy] = None,
    ) -> None:
        if isinstance(summary_prompt, str):
            summary_prompt = PromptTemplate(summary_prompt)
        if min_members < 1:
            raise ValueError(f"min_members must be >= 1, got {min_members!r}.")
        self.min_members = min_members
        self.llm = llm
        self.summary_prompt = summary_prompt or DEFAULT_SUMMARY_PROMPT
        self.max_members = max_members
        self.max_relations = max_relations
        self.num_workers = num_workers
        self._cache = LLMCache(cache_dir)
        self._policy = retry_policy or RetryPolicy()
        self._fallback = ExtractiveSummarizer()

    def _get_prompts(self) -> PromptDictType:
        return {"summary_prompt": self.summary_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "summary_prompt" in prompts:
            self.summary_prompt = prompts["summary_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def module_input(self, module: Module, ctx: SummaryContext) -> Dict[str, str]:
        """The prompt variables of ``module``, each fenced as document-derived data."""
        g = ctx.graph
        members = ctx.central_members(module, self.max_members)
        mset = set(members)
        lines = [f"- {g.entities[e].name}: {short(g.entities[e].description, 160)}" for e in members]
        rels = sorted(
            (r for r in g.relations if r.source in mset and r.target in mset), key=lambda r: (-r.weight, r.key)
        )[: self.max_relations]
        rel_lines = [
            f"- {g.entities[r.source].name} -- {g.entities[r.target].name}: {short(r.description, 120)}" for r in rels
        ]
        children = [f"- {g.modules[c].title}" for c in module.children if g.modules[c].title]
        return {
            "members": fence("\n".join(lines)),
            "relations": fence("\n".join(rel_lines) or "(none)"),
            "children": fence("\n".join(children) or "(none)"),
        }

    def _small(self, module: Module, ctx: SummaryContext) -> Tuple[str, str]:
        # an LLM has nothing to summarise beyond the entity's own description: no call
        ents = [ctx.graph.entities[e] for e in module.members]
        title = ", ".join(e.name for e in ents) or module.id
        said = " ".join(f"{e.name}: {e.description.rstrip('.')}." for e in ents if e.description)
        return title, " ".join([said] + ctx.representative_sentences(module, 1)).strip() or title

    def summarize_many(
        self,
        modules: Sequence[Module],
        ctx: SummaryContext,
        cost: StageCost,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
        show_progress: bool = False,
    ) -> List[Tuple[str, str]]:
        """``(title, summary)`` per module, in order; the LLM calls run concurrently."""
        out: List[Any] = [None] * len(modules)
        todo = []
        for i, m in enumerate(modules):
            if len(m.members) < self.min_members:
                out[i] = self._small(m, ctx)
            else:
                todo.append(i)
        requests = [
            LLMRequest(
                self.summary_prompt.format(**self.module_input(modules[i], ctx)),
                parse=lambda text, _meta: parse_summary(text),
                label=f"module {modules[i].id}",
            )
            for i in todo
        ]
        desc = f"Summarising modules (llm, level {modules[0].level})" if modules else "Summarising modules (llm)"
        runner = LLMRunner(
            self.llm,
            stage=cost,
            cache=self._cache,
            policy=self._policy,
            budget=budget,
            num_workers=num_workers or self.num_workers,
            show_progress=show_progress,
            desc=desc,
        )
        for i, res in zip(todo, runner.run(requests)):
            if res.ok:
                out[i] = res.value
                continue
            logger.warning(
                "summaries: module %s gave malformed output twice (%s); using the extractive summary for it.",
                modules[i].id,
                res.error,
            )
            out[i] = self._fallback.summarize(modules[i], ctx, cost)
        return out

    def summarize(self, module: Module, ctx: SummaryContext, cost: StageCost) -> Tuple[str, str]:
        return self.summarize_many([module], ctx, cost)[0]


def summarize_all(
    modules: Sequence[Module],
    summarizer: object,
    ctx: SummaryContext,
    cost: StageCost,
    show_progress: bool = False,
    budget: Optional[LLMBudget] = None,
    num_workers: Optional[int] = None,
) -> None:
    """Fill ``title``/``summary`` of every module, finest level first (in place); the modules of
    one level are independent, so a summariser with ``summarize_many`` gets them as one batch."""
    ordered = sorted(modules, key=lambda m: (m.level, m.id))
    for _, level in groupby(ordered, key=lambda m: m.level):
        batch = list(level)
        if hasattr(summarizer, "summarize_many"):
            results = summarizer.summarize_many(
                batch, ctx, cost, budget=budget, num_workers=num_workers, show_progress=show_progress
            )
        else:
            it: Any = batch
            if show_progress:
                from tqdm.auto import tqdm

                it = tqdm(batch, desc=f"Summarising modules ({getattr(summarizer, 'name', '')})")
            results = [summarizer.summarize(m, ctx, cost) for m in it]  # type: ignore[attr-defined]
        for m, (title, summary) in zip(batch, results):
            m.title, m.summary = title, summary
