"""Causal gates between distant modules: candidate pairs, judges, top-down pruning.

Level by level, coarsest first. A pair is a candidate only if it is *distant*: the two
modules have different parents and no relation edge joins their members. Pairs whose
ancestors are already gated are skipped (reachable through the parent gate). Each module
proposes at most ``gate_candidates_per_module`` partners ranked by summary-embedding
cosine; only those pairs are judged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Gate, Module
from llama_index_ext_causalrag.causal_graph.keyphrases import short
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_GATE_JUDGE_PROMPT
from llama_index_ext_causalrag.llm.cache import LLMCache, StageCost
from llama_index_ext_causalrag.llm.io import LLMBudget, LLMRequest, LLMRunner, RetryPolicy, fence
from llama_index_ext_causalrag.llm.parse import p_yes_from_response, parse_yes_no

logger = logging.getLogger(__name__)

DEFAULT_GATE_CANDIDATES = 5  # candidate module pairs judged per module (the reference code's)


@dataclass
class Judgement:
    yes: bool
    score: float
    reason: str = ""
    failed: bool = False


@dataclass
class GateContext:
    """Corpus evidence for judges: sentences, who mentions what, which sentences carry a cue."""

    graph: CausalGraph
    sentences: List[str]
    sentence_unit: List[str]
    sentence_entities: List[Set[str]]
    entity_sentences: Dict[str, List[int]]
    cue: np.ndarray  # (n_sentences,) bool
    _cache: Dict[str, Tuple[Set[int], Set[int]]] = field(default_factory=dict)

    def module_sentences(self, module: Module) -> Tuple[Set[int], Set[int]]:
        """(cue sentences mentioning a member, those sentences' +-1 windows within the unit)."""
        if module.id not in self._cache:
            mentions: Set[int] = set()
            for e in module.members:
                mentions.update(self.entity_sentences.get(e, ()))
            cue = {s for s in mentions if self.cue[s]}
            window = set(mentions)
            for s in mentions:
                for t in (s - 1, s + 1):
                    if 0 <= t < len(self.sentences) and self.sentence_unit[t] == self.sentence_unit[s]:
                        window.add(t)
            self._cache[module.id] = (cue, window)
        return self._cache[module.id]


class OfflineGateJudge:
    """Evidence judge: sentences with a causal cue phrase (cause, lead to, increase, inhibit,
    because, ...) mentioning a member of one module, whose +-1 sentence window in the same unit
    mentions a member of the other.

    ``yes`` when there are at least ``min_evidence`` such sentences AND ``min_lift`` times more
    than chance, ``(|cue_A| |window_B| + |cue_B| |window_A|) / n_sentences``: large coarse modules
    share cue sentences by sheer size, so a fixed count alone would gate them all. The
    summary-embedding cosine breaks ties in the score.
    """

    name = "offline"

    def __init__(self, min_evidence: int = 2, min_lift: float = 2.0) -> None:
        if not isinstance(min_evidence, int) or min_evidence < 1:
            raise ValueError(f"min_evidence must be an int >= 1, got {min_evidence!r}.")
        if not min_lift >= 0:
            raise ValueError(f"min_lift must be >= 0, got {min_lift!r}; use 0 to ignore chance co-location.")
        self.min_evidence = min_evidence
        self.min_lift = min_lift

    def judge(self, a: Module, b: Module, cos: float, ctx: GateContext, cost: StageCost) -> Judgement:
        cue_a, win_a = ctx.module_sentences(a)
        cue_b, win_b = ctx.module_sentences(b)
        evidence = sorted((cue_a & win_b) | (cue_b & win_a))
        n = len(evidence)
        expected = (len(cue_a) * len(win_b) + len(cue_b) * len(win_a)) / max(len(ctx.sentences), 1)
        lift = n / expected if expected > 0 else 0.0
        score = n / (n + 1.0) * (0.9 + 0.1 * max(cos, 0.0))
        reason = short(ctx.sentences[evidence[0]], 200) if evidence else "no causal cue sentence links them"
        yes = n >= self.min_evidence and lift >= self.min_lift
        return Judgement(yes, float(score), f"{n} cue sentence(s), lift {lift:.1f}: {reason}")


class LLMGateJudge(PromptMixin):
    """Yes/no with a one-line reason from the LLM; P(yes) from logprobs when the LLM returns them.

    Small local models answer "yes" to almost everything; their P(yes) still separates the
    cases, so with logprobs the decision is ``P(yes) >= p_yes_threshold``. An answer that
    starts with neither yes nor no is retried once, then counts as "no gate" with a warning.
    ``max_answer_tokens`` is passed to ``llm.complete`` as ``max_tokens`` (the OpenAI-style
    keyword) to stop a verbose model after the verdict and a short reason; ``None`` passes nothing.
    The pairs of one level are judged concurrently (``num_workers``).
    """

    name = "llm"

    def __init__(
        self,
        llm: LLM,
        judge_prompt: Optional[Union[str, PromptTemplate]] = None,
        p_yes_threshold: float = 0.5,
        cache_dir: Optional[str] = None,
        max_answer_tokens: Optional[int] = None,
        num_workers: Optional[int] = None,
        retry_policy: Optional[RetryPolicy] = None,
    ) -> None:
        if not 0.0 <= p_yes_threshold <= 1.0:
            raise ValueError(f"p_yes_threshold must be in [0, 1], got {p_yes_threshold!r}.")
        if max_answer_tokens is not None and max_answer_tokens < 1:
            raise ValueError(f"max_answer_tokens must be >= 1 or None, got {max_answer_tokens!r}.")
        if isinstance(judge_prompt, str):
            judge_prompt = PromptTemplate(judge_prompt)
        self.llm = llm
        self.judge_prompt = judge_prompt or DEFAULT_GATE_JUDGE_PROMPT
        self.p_yes_threshold = p_yes_threshold
        self.max_answer_tokens = max_answer_tokens
        self.num_workers = num_workers
        self._cache = LLMCache(cache_dir)
        self._policy = retry_policy or RetryPolicy()

    def _get_prompts(self) -> PromptDictType:
        return {"judge_prompt": self.judge_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "judge_prompt" in prompts:
            self.judge_prompt = prompts["judge_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    @staticmethod
    def parse(text: str) -> Tuple[bool, str]:
        said_yes, reason = parse_yes_no(text)
        return said_yes, short(reason, 200)

    def _judgement(self, text: str, p_yes: Optional[float]) -> Judgement:
        said_yes, reason = self.parse(text)
        if p_yes is not None:
            return Judgement(p_yes >= self.p_yes_threshold, float(p_yes), reason)
        return Judgement(said_yes, 1.0 if said_yes else 0.0, reason)

    def request(self, a: Module, b: Module) -> LLMRequest:
        fields = {
            "title_a": fence(a.title),
            "summary_a": fence(a.summary),
            "title_b": fence(b.title),
            "summary_b": fence(b.summary),
        }
        return LLMRequest(
            self.judge_prompt.format(**fields),
            parse=self._judgement,
            retry_suffix=' Start with "yes" or "no".',
            extract_meta=p_yes_from_response,
            gen_kwargs={} if self.max_answer_tokens is None else {"max_tokens": self.max_answer_tokens},
            label=f"pair {a.id}/{b.id}",
        )

    def judge_many(
        self,
        pairs: Sequence[Tuple[Module, Module, float]],
        ctx: Any,
        cost: StageCost,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
        show_progress: bool = False,
        desc: str = "Judging gates (llm)",
    ) -> List[Judgement]:
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
        out = []
        for (a, b, _), res in zip(pairs, runner.run([self.request(a, b) for a, b, _ in pairs])):
            if res.ok:
                out.append(res.value)
                continue
            logger.warning(
                "gates: the judge gave malformed output twice for %s/%s (%s); no gate for this pair.",
                a.id,
                b.id,
                res.error,
            )
            out.append(Judgement(False, 0.0, "judge output unparseable", failed=True))
        return out

    def judge(self, a: Module, b: Module, cos: float, ctx: Any, cost: StageCost) -> Judgement:
        return self.judge_many([(a, b, cos)], ctx, cost)[0]


def module_adjacency(graph: CausalGraph, level: int, module_of: Dict[str, str]) -> Set[Tuple[str, str]]:
    """Pairs of modules of ``level`` joined by at least one relation edge."""
    adj: Set[Tuple[str, str]] = set()
    for r in graph.relations:
        ma, mb = module_of.get(r.source), module_of.get(r.target)
        if ma is not None and mb is not None and ma != mb:
            adj.add((min(ma, mb), max(ma, mb)))
    return adj


def candidate_pairs(
    modules: Sequence[Module],
    embeddings: np.ndarray,
    adjacent: Set[Tuple[str, str]],
    blocked: Set[Tuple[str, str]],
    k: int,
) -> Tuple[List[Tuple[int, int, float]], int]:
    """Up to ``k`` distant partners per module by cosine; ``(pairs (i<j, cos), n_distant)``.

    ``embeddings``: (n, d) unit rows aligned with ``modules``. Distant = different parents
    (top-level modules have none), not in ``adjacent``, not in ``blocked`` (ancestor gated).
    """
    n = len(modules)
    if n < 2 or k == 0:
        return [], 0
    sims = embeddings @ embeddings.T
    parents = np.array([m.parent or f"#{i}" for i, m in enumerate(modules)], dtype=object)
    ok = parents[:, None] != parents[None, :]
    np.fill_diagonal(ok, False)
    pos = {m.id: i for i, m in enumerate(modules)}
    for a, b in adjacent | blocked:
        if a in pos and b in pos:
            ok[pos[a], pos[b]] = ok[pos[b], pos[a]] = False
    n_distant = int(np.triu(ok, 1).sum())
    masked = np.where(ok, sims, -np.inf)
    pairs: Dict[Tuple[int, int], float] = {}
    kk = min(k, n - 1)
    top = np.argsort(-masked, axis=1, kind="stable")[:, :kk]
    for i in range(n):
        for j in top[i]:
            if np.isfinite(masked[i, j]):
                key = (min(i, int(j)), max(i, int(j)))
                pairs[key] = float(sims[i, j])
    return sorted((a, b, c) for (a, b), c in pairs.items()), n_distant


def _descendants_at(graph: CausalGraph, module_id: str, level: int) -> List[str]:
    out, stack = [], [module_id]
    while stack:
        m = graph.modules[stack.pop()]
        if m.level == level:
            out.append(m.id)
        elif m.level > level:
            stack.extend(m.children)
    return out


def build_gates(
    graph: CausalGraph,
    module_embeddings: Dict[str, np.ndarray],
    judge: object,
    ctx: GateContext,
    cost: StageCost,
    *,
    gate_candidates_per_module: int = DEFAULT_GATE_CANDIDATES,
    show_progress: bool = False,
    budget: Optional[LLMBudget] = None,
    num_workers: Optional[int] = None,
) -> Tuple[List[Gate], Dict[str, Dict[str, int]]]:
    """All gates and per-level statistics (possible, distant, judged, gates).

    Levels run one after the other (a gate prunes the pairs below it); the pairs of one level
    go to ``judge.judge_many`` as one batch when the judge has it."""
    gates: List[Gate] = []
    stats: Dict[str, Dict[str, int]] = {}
    gated: Set[Tuple[str, str]] = set()
    for level in range(graph.num_levels - 1, -1, -1):
        mods = graph.modules_at(level)
        n = len(mods)
        module_of = {e: m.id for m in mods for e in m.members}
        adjacent = module_adjacency(graph, level, module_of)
        blocked: Set[Tuple[str, str]] = set()
        for x, y in gated:  # descendants of gated ancestors are reachable through the gate
            for a in _descendants_at(graph, x, level):
                for b in _descendants_at(graph, y, level):
                    blocked.add((min(a, b), max(a, b)))
        E = np.stack([module_embeddings[m.id] for m in mods]) if mods else np.zeros((0, 1))
        pairs, n_distant = candidate_pairs(mods, E, adjacent, blocked, gate_candidates_per_module)
        desc = f"Judging gates at level {level} ({getattr(judge, 'name', '')})"
        triples = [(mods[i], mods[j], cos) for i, j, cos in pairs]
        if hasattr(judge, "judge_many"):
            judgements = judge.judge_many(
                triples,
                ctx,
                cost,
                budget=budget,
                num_workers=num_workers,
                show_progress=show_progress and bool(pairs),
                desc=desc,
            )
        else:
            it: Any = triples
            if show_progress and pairs:
                from tqdm.auto import tqdm

                it = tqdm(triples, desc=desc)
            judgements = [judge.judge(a, b, cos, ctx, cost) for a, b, cos in it]  # type: ignore[attr-defined]
        made = 0
        for (a, b, _), jd in zip(triples, judgements):
            if jd.yes:
                gates.append(Gate(a.id, b.id, level, round(jd.score, 6), jd.reason, getattr(judge, "name", "")))
                gated.add((a.id, b.id))
                made += 1
        stats[str(level)] = {
            "modules": n,
            "possible_pairs": n * (n - 1) // 2,
            "distant_pairs": n_distant,
            "skipped_by_ancestor_gate": len(blocked),
            "judged": len(pairs),
            "gates": made,
        }
    return gates, stats
