"""``CausalFilterPostprocessor``: drop spurious neighbours from a gated-expansion result.

CausalRAG2 (arXiv 2602.05143) step 8. With an LLM: one call over the retrieved subgraph
(short ids, paths, short texts, edges) returning the ids to keep as JSON. Offline: keep the
nodes whose path from their seed carries causal evidence (a gate, or relation edges backed by
a cause/effect sentence and no bare co-occurrence edge), plus the top seeds. The offline rule
reads only the provenance written by :class:`GatedExpansionRetriever`, never the node text,
so an instruction planted in a document cannot change what it keeps.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.causal_graph.expansion import GATE, RELATION
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_CAUSAL_FILTER_PROMPT
from llama_index_ext_causalrag.causal_graph.stages import CAUSAL_FILTER
from llama_index_ext_causalrag.explain import StageRecorder
from llama_index_ext_causalrag.llm.cache import StageCost
from llama_index_ext_causalrag.llm.io import LLMRequest, LLMRunner, RetryPolicy, fence, strip_markup
from llama_index_ext_causalrag.llm.parse import find_json_list, find_json_object
from llama_index_ext_causalrag.llm.resolve import resolve_query_llm
from llama_index_ext_causalrag.text.provenance import annotate, get_provenance

logger = logging.getLogger(__name__)
_stages = StageRecorder(__name__, "causalrag2")

OFFLINE_ALTERNATIVE = "causal-path rule (gate or cue-backed relation edges) plus the top seeds"
RETRY_SUFFIX = '\n\nYour previous answer was not valid JSON. Return ONLY {"keep": ["id", ...]}.'


def edges_are_causal(edges: Sequence[Dict[str, Any]]) -> bool:
    """True when the edge records hold a gate or a cue-backed relation, and no relation without
    cue evidence (mere co-occurrence). Hierarchy and membership edges are neutral."""
    found = False
    for e in edges:
        if e.get("type") == GATE:
            found = True
        elif e.get("type") == RELATION:
            if not e.get("causal", False):
                return False
            found = True
    return found


def parse_keep_ids(text: str) -> List[str]:
    """Ids from ``{"keep": [...]}`` or a bare JSON list. Raises ``ValueError`` when malformed."""
    found = find_json_object(text)
    obj: Any = found.get("keep", found.get("ids")) if found is not None else find_json_list(text)
    if not isinstance(obj, list) or not all(isinstance(x, (str, int)) for x in obj):
        raise ValueError(f'filter output is not {{"keep": [ids]}}: {text[:120]!r}')
    return [str(x) for x in obj]


class CausalFilterPostprocessor(BaseNodePostprocessor):
    """Keep nodes on a valid causal path to the question; drop topical or co-occurrence noise.

    The LLM step runs at query time, so it uses the ``llm`` it is given, or ``Settings.llm`` with
    ``llm="settings"``; ``llm=None`` selects the offline rule (logged once), also when
    ``Settings.llm`` is set for answers. ``apostprocess_nodes`` awaits the LLM. Input
    order is kept. Never returns an empty list for a non-empty input: when nothing qualifies
    (or the LLM keeps nothing) the ``top_seeds`` best nodes are kept. Every kept node gets
    provenance ``filter`` = ``{"mode": "llm"|"offline"|"passthrough", "reason": ...}``.
    """

    top_seeds: int = Field(
        default=CAUSAL_FILTER.top_seeds, ge=1, description="Seeds (and, as a floor, best nodes) always kept."
    )
    max_text_chars: int = Field(
        default=CAUSAL_FILTER.max_text_chars, ge=20, description="Characters of node text shown to the LLM."
    )
    _llm: Optional[LLM] = PrivateAttr(default=None)
    _prompt: BasePromptTemplate = PrivateAttr(default=DEFAULT_CAUSAL_FILTER_PROMPT)
    _stats: Dict[str, float] = PrivateAttr(default_factory=dict)

    num_workers: Optional[int] = Field(
        default=None, ge=1, description="Concurrent LLM calls in postprocess_batch (None: automatic)."
    )
    _policy: RetryPolicy = PrivateAttr(default_factory=RetryPolicy)

    def __init__(
        self,
        llm: Union[LLM, str, None] = None,
        filter_prompt: Optional[str | BasePromptTemplate] = None,
        retry_policy: Optional[RetryPolicy] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._policy = retry_policy or RetryPolicy()
        self._llm = resolve_query_llm(llm, "CausalFilterPostprocessor", OFFLINE_ALTERNATIVE)
        if isinstance(filter_prompt, str):
            filter_prompt = PromptTemplate(filter_prompt)
        self._prompt = filter_prompt or DEFAULT_CAUSAL_FILTER_PROMPT
        self._stats = {"calls": 0, "seconds": 0.0, "failures": 0, "queries": 0}

    @classmethod
    def class_name(cls) -> str:
        return "CausalFilterPostprocessor"

    @property
    def stats(self) -> Dict[str, float]:
        """LLM calls, seconds, unparseable answers and queries seen so far."""
        return dict(self._stats)

    def _get_prompts(self) -> PromptDictType:
        return {"filter_prompt": self._prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "filter_prompt" in prompts:
            self._prompt = prompts["filter_prompt"]

    # BaseNodePostprocessor is not a PromptMixin in llama-index-core 0.14: expose the same API.
    def get_prompts(self) -> PromptDictType:
        """``{"filter_prompt": ...}``, as ``PromptMixin.get_prompts``."""
        return self._get_prompts()

    def update_prompts(self, prompts: PromptDictType) -> None:
        """Replace prompts by name (``filter_prompt``); unknown names are ignored."""
        self._update_prompts(prompts)

    # ----------------------------------------------------------------- offline
    def _floor(self, nodes: List[NodeWithScore]) -> List[int]:
        return list(range(min(self.top_seeds, len(nodes))))

    def offline_keep(self, nodes: Sequence[NodeWithScore]) -> List[Tuple[int, str]]:
        """(index, reason) of the nodes the offline rule keeps, in input order."""
        keep: List[Tuple[int, str]] = []
        seeds = 0
        for i, n in enumerate(nodes):
            prov = get_provenance(n)
            if edges_are_causal(prov.get("edges", [])):
                keep.append((i, "causal path"))
            elif (int(prov.get("hop", 0)) == 0 or prov.get("text_seed", False)) and seeds < self.top_seeds:
                keep.append((i, "top seed"))
                seeds += 1
        if not keep:
            keep = [(i, "best node (nothing else qualified)") for i in self._floor(list(nodes))]
        return keep

    # --------------------------------------------------------------------- llm
    def _render(self, nodes: Sequence[NodeWithScore], query_str: str) -> str:
        items, edges = [], {}
        for i, n in enumerate(nodes):
            prov = get_provenance(n)
            path = " -> ".join(prov.get("path_names", prov.get("path", []))) or "(text match)"
            text = " ".join(strip_markup(n.node.get_content(metadata_mode=MetadataMode.NONE)).split())
            text = text[: self.max_text_chars]
            items.append(f"[n{i + 1}] path:\n{fence(path)}\ntext:\n{fence(text)}")
            for e in prov.get("edges", []):
                kind = e.get("type", "?") + (" (causal)" if e.get("causal") else "")
                edges[(e.get("from_name", e.get("from")), e.get("to_name", e.get("to")))] = kind
        edge_lines = [f"{a} -- {b}: {k}" for (a, b), k in sorted(edges.items(), key=str)] or ["(none)"]
        return self._prompt.format(query_str=query_str, items="\n".join(items), edges=fence("\n".join(edge_lines)))

    def _keep_from_ids(self, nodes: Sequence[NodeWithScore], ids: List[str]) -> List[Tuple[int, str]]:
        valid = {f"n{i + 1}": i for i in range(len(nodes))}
        invented = [x for x in ids if x.strip().lower() not in valid]
        if invented:
            logger.warning(
                "CausalFilterPostprocessor: the LLM returned ids that are not in the input, ignored: %s",
                ", ".join(invented[:10]),
            )
        picked = sorted({valid[x.strip().lower()] for x in ids if x.strip().lower() in valid})
        if not picked:
            logger.warning(
                "CausalFilterPostprocessor: the LLM kept no valid id; keeping the %d best nodes.",
                min(self.top_seeds, len(nodes)),
            )
            return [(i, "best node (LLM kept none)") for i in self._floor(list(nodes))]
        return [(i, "kept by LLM") for i in picked]

    def _llm_batch(
        self, batch: Sequence[Tuple[Sequence[NodeWithScore], str]], num_workers: Optional[int]
    ) -> Tuple[LLMRunner, StageCost, List[LLMRequest]]:
        if self._llm is None:
            raise ValueError("CausalFilterPostprocessor.llm_keep needs an LLM; pass llm= to the constructor.")
        stage = StageCost(name="causal_filter")
        runner = LLMRunner(
            self._llm,
            stage=stage,
            policy=self._policy,
            num_workers=num_workers or self.num_workers,
            desc="CausalFilterPostprocessor",
            on_error="return",
        )
        reqs = [
            LLMRequest(self._render(nodes, q), parse=lambda text, _m: parse_keep_ids(text), retry_suffix=RETRY_SUFFIX)
            for nodes, q in batch
        ]
        return runner, stage, reqs

    def _kept(
        self,
        batch: Sequence[Tuple[Sequence[NodeWithScore], str]],
        stage: StageCost,
        outcomes: List[Any],
        seconds: float,
    ) -> List[Tuple[Optional[List[Tuple[int, str]]], str]]:
        self._stats["calls"] += stage.calls
        self._stats["seconds"] += seconds
        self._stats["failures"] += sum(not o.ok for o in outcomes)
        return [
            (self._keep_from_ids(nodes, o.value) if o.ok else None, o.error) for (nodes, _), o in zip(batch, outcomes)
        ]

    def _llm_keep_many(
        self, batch: Sequence[Tuple[Sequence[NodeWithScore], str]], num_workers: Optional[int] = None
    ) -> List[Tuple[Optional[List[Tuple[int, str]]], str]]:
        """Per query: ``(kept, why_not)``; ``kept`` is None when the LLM output stayed malformed or
        the LLM kept failing (``why_not`` says which)."""
        runner, stage, reqs = self._llm_batch(batch, num_workers)
        t0 = time.perf_counter()
        outcomes = runner.run(reqs)
        return self._kept(batch, stage, outcomes, time.perf_counter() - t0)

    async def _allm_keep_many(
        self, batch: Sequence[Tuple[Sequence[NodeWithScore], str]], num_workers: Optional[int] = None
    ) -> List[Tuple[Optional[List[Tuple[int, str]]], str]]:
        """:meth:`_llm_keep_many` awaiting the LLM (``acomplete``), never blocking the event loop."""
        runner, stage, reqs = self._llm_batch(batch, num_workers)
        t0 = time.perf_counter()
        outcomes = await runner.arun(reqs)
        return self._kept(batch, stage, outcomes, time.perf_counter() - t0)

    def llm_keep(self, nodes: Sequence[NodeWithScore], query_str: str) -> Optional[List[Tuple[int, str]]]:
        """(index, reason) kept by the LLM; ``None`` when its output was malformed twice or the LLM
        kept failing."""
        return self._llm_keep_many([(nodes, query_str)])[0][0]

    # -------------------------------------------------------------------- main
    def _finish(
        self, nodes: List[NodeWithScore], kept: Optional[List[Tuple[int, str]]], why: str, mode: str
    ) -> List[NodeWithScore]:
        if kept is None:
            malformed = why.startswith("malformed")
            logger.warning(
                "CausalFilterPostprocessor: %s (%s); passing the %d input nodes through unfiltered.",
                "the LLM gave malformed output twice" if malformed else "the LLM call failed",
                why,
                len(nodes),
            )
            kept, mode = (
                [(i, "LLM output unparseable" if malformed else "LLM call failed") for i in range(len(nodes))],
                "passthrough",
            )
        _stages.stage("causal_filter", {"in": len(nodes), "kept": len(kept)}, lambda: self._verdicts(nodes, kept, mode))
        return [annotate(nodes[i], filter={"mode": mode, "reason": reason}) for i, reason in kept]

    def _verdicts(self, nodes: List[NodeWithScore], kept: List[Tuple[int, str]], mode: str) -> Dict[str, Any]:
        why_kept = dict(kept)
        dropped = (
            "not kept by the LLM" if mode == "llm" else f"no causal path and not among the top {self.top_seeds} seeds"
        )
        return {
            "took": {"nodes": len(nodes), "mode": mode, "top_seeds": self.top_seeds},
            "decided": {
                "verdicts": [
                    {"id": n.node.node_id, "kept": i in why_kept, "reason": why_kept.get(i, dropped)}
                    for i, n in enumerate(nodes)
                ]
            },
            "why": "Keep nodes on a causal path (a gate or cue-backed relations) to the question, plus the top "
            "seeds; drop topical or co-occurrence neighbours."
            if mode != "llm"
            else "The LLM kept the nodes on a valid causal path to the question.",
        }

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        if not nodes:
            return []
        self._stats["queries"] += 1
        if self._llm is None:
            return self._finish(nodes, self.offline_keep(nodes), "", "offline")
        kept, why = self._llm_keep_many([(nodes, self._query_str(query_bundle))])[0]
        return self._finish(nodes, kept, why, "llm")

    async def _apostprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        if not nodes:
            return []
        self._stats["queries"] += 1
        if self._llm is None:
            return self._finish(nodes, self.offline_keep(nodes), "", "offline")
        kept, why = (await self._allm_keep_many([(nodes, self._query_str(query_bundle))]))[0]
        return self._finish(nodes, kept, why, "llm")

    @staticmethod
    def _query_str(query_bundle: Optional[QueryBundle]) -> str:
        if query_bundle is None:
            raise ValueError(
                "CausalFilterPostprocessor needs query_bundle when an LLM is set; "
                "call postprocess_nodes(nodes, query_str=...)."
            )
        return query_bundle.query_str

    def postprocess_batch(
        self, batch: Sequence[Tuple[List[NodeWithScore], str]], num_workers: Optional[int] = None
    ) -> List[List[NodeWithScore]]:
        """``postprocess_nodes`` over many ``(nodes, query_str)`` pairs, the LLM calls running
        ``num_workers`` at once; results in input order, as if filtered one by one."""
        batch = [(list(nodes), q) for nodes, q in batch]
        if self._llm is None:
            return [self.postprocess_nodes(nodes, query_str=q) for nodes, q in batch]
        todo = [k for k, (nodes, _) in enumerate(batch) if nodes]
        self._stats["queries"] += len(todo)
        results = self._llm_keep_many([batch[k] for k in todo], num_workers)
        out: List[List[NodeWithScore]] = [[] for _ in batch]
        for k, (kept, why) in zip(todo, results):
            out[k] = self._finish(batch[k][0], kept, why, "llm")
        return out


__all__ = ["CausalFilterPostprocessor", "edges_are_causal", "parse_keep_ids"]
