"""Module summaries: an LLM title + 2-4 sentences, or an extractive offline summary.

The index calls summarisers finest level first, so a module's prompt can list the titles
of its children.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate

from llama_index_ext_causalrag.causal_graph.cost import (
    LLMCache,
    StageCost,
    cached_complete,
    parse_json_object,
    store,
)
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Module
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_SUMMARY_PROMPT
from llama_index_ext_causalrag.causal_graph.text import short

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
        return sorted(
            module.members, key=lambda e: (-deg.get(e, 0.0), -len(ents[e].unit_ids), ents[e].name)
        )[:k]

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


class LLMSummarizer:
    """Title and 2-4 sentences from the LLM (members with descriptions, top relations, child titles).

    Malformed output is retried once, then the module gets the extractive summary and a
    warning. Answers are cached on disk like the extractor's. A module with fewer than
    ``min_members`` entities (default: a single entity) costs no call: its title is the entity's
    name and its summary the entity's description plus its most representative sentence.
    """

    name = "llm"

    def __init__(self, llm: LLM, summary_prompt: Optional[Union[str, PromptTemplate]] = None,
                 max_members: int = 30, max_relations: int = 20, cache_dir: Optional[str] = None,
                 min_members: int = 2) -> None:
        if isinstance(summary_prompt, str):
            summary_prompt = PromptTemplate(summary_prompt)
        if min_members < 1:
            raise ValueError(f"min_members must be >= 1, got {min_members!r}.")
        self.min_members = min_members
        self.llm = llm
        self.summary_prompt = summary_prompt or DEFAULT_SUMMARY_PROMPT
        self.max_members = max_members
        self.max_relations = max_relations
        self._cache = LLMCache(cache_dir)
        self._fallback = ExtractiveSummarizer()

    def module_input(self, module: Module, ctx: SummaryContext) -> Dict[str, str]:
        g = ctx.graph
        members = ctx.central_members(module, self.max_members)
        mset = set(members)
        lines = [f"- {g.entities[e].name}: {short(g.entities[e].description, 160)}" for e in members]
        rels = sorted((r for r in g.relations if r.source in mset and r.target in mset),
                      key=lambda r: (-r.weight, r.key))[: self.max_relations]
        rel_lines = [f"- {g.entities[r.source].name} -- {g.entities[r.target].name}: {short(r.description, 120)}"
                     for r in rels]
        children = [f"- {g.modules[c].title}" for c in module.children if g.modules[c].title]
        return {"members": "\n".join(lines), "relations": "\n".join(rel_lines) or "(none)",
                "children": "\n".join(children) or "(none)"}

    def summarize(self, module: Module, ctx: SummaryContext, cost: StageCost) -> Tuple[str, str]:
        if len(module.members) < self.min_members:
            # an LLM has nothing to summarise beyond the entity's own description: no call
            ents = [ctx.graph.entities[e] for e in module.members]
            title = ", ".join(e.name for e in ents) or module.id
            said = " ".join(f"{e.name}: {e.description.rstrip('.')}." for e in ents if e.description)
            return title, " ".join([said] + ctx.representative_sentences(module, 1)).strip() or title
        fields = self.module_input(module, ctx)
        prompt = self.summary_prompt.format(**fields)
        template = self.summary_prompt.get_template()
        key_input = "\n".join(fields[k] for k in sorted(fields))
        for attempt in range(2):
            text, _, hit = cached_complete(
                self.llm, prompt if attempt == 0 else prompt + "\nReturn ONLY the JSON object.",
                template=template, cache_input=key_input, stage=cost, cache=self._cache)
            try:
                obj = parse_json_object(text)
                title, summary = str(obj["title"]).strip(), str(obj["summary"]).strip()
                if not title or not summary:
                    raise ValueError("empty title or summary")
            except (ValueError, KeyError) as e:
                if attempt == 0:
                    continue
                cost.failures += 1
                logger.warning("summaries: module %s gave malformed output twice (%s); "
                               "using the extractive summary for it.", module.id, e)
                return self._fallback.summarize(module, ctx, cost)
            if not hit:
                store(self._cache, self.llm, template, key_input, text)
            return title, summary
        raise AssertionError("unreachable")  # pragma: no cover


def summarize_all(modules: Sequence[Module], summarizer: object, ctx: SummaryContext, cost: StageCost,
                  show_progress: bool = False) -> None:
    """Fill ``title``/``summary`` of every module, finest level first (in place)."""
    ordered = sorted(modules, key=lambda m: (m.level, m.id))
    it = ordered
    if show_progress:
        from tqdm.auto import tqdm

        it = tqdm(ordered, desc=f"Summarising modules ({getattr(summarizer, 'name', '')})")
    for m in it:
        m.title, m.summary = summarizer.summarize(m, ctx, cost)  # type: ignore[attr-defined]
