"""Concurrency benchmark of the LLM layer: a CausalGraphIndex build with a scripted remote LLM.

The scripted LLM's ``acomplete`` waits ``--latency`` +- ``--jitter`` seconds per call, raises a
rate-limit error (HTTP 429) on ``--rate-limit-share`` of the calls and answers malformed JSON on
``--malformed-share``; otherwise it answers extraction, summary and gate-judge prompts with
plausible deterministic JSON. The faults are drawn per (prompt, attempt), so every run sees the
same ones whatever the completion order.

For each ``--workers`` value the index is built on the first ``--articles`` HolisQA articles with a
fresh cache directory; the script reports wall time against the ideal
``calls x mean latency / workers``, checks that the graph equals the ``num_workers=1`` graph and
that every answer the LLM gave is in the cache, and writes ``results.json``. "LLM stages" is the
wall time of extraction, summaries and gate judgements alone (the rest of a build -- sentence
splitting, Leiden, embeddings -- does not depend on ``num_workers``)::

    nice -n 10 python benchmarks/scripts/bench_llm_concurrency.py --path <holisqa>/biology
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.schema import Document

from causalrag_bench.cli import write_results
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.extract import OfflineEntityExtractor
from llama_index_ext_causalrag.llm.cache import LLMCache
from llama_index_ext_causalrag.llm.io import RetryPolicy, cache_key

_FENCED = re.compile(r"<<<DATA\n(.*?)\nDATA>>>", re.S)


class RateLimitError(Exception):
    """Shaped like a provider's 429 error (detected by class name and status code)."""

    status_code = 429


def _u(*parts: Any) -> float:
    """A uniform number in [0, 1) fixed by ``parts``."""
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16) / 16**12


class RemoteLikeLLM(CustomLLM):
    latency: float = 0.3
    jitter: float = 0.1
    rate_limit_share: float = 0.05
    malformed_share: float = 0.01
    _attempts: Dict[str, int] = PrivateAttr(default_factory=dict)
    _offline: Any = PrivateAttr(default=None)
    _stats: Dict[str, int] = PrivateAttr(default_factory=dict)
    _answered: List[str] = PrivateAttr(default_factory=list)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._attempts, self._offline = {}, OfflineEntityExtractor()
        self._stats = {"requests": 0, "rate_limited": 0, "malformed": 0}
        self._answered = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="remote-like-scripted")

    def _answer(self, prompt: str) -> str:
        k = self._attempts[prompt] = self._attempts.get(prompt, 0) + 1
        self._stats["requests"] += 1
        if _u(prompt, k, "429") < self.rate_limit_share:
            self._stats["rate_limited"] += 1
            raise RateLimitError("429 Too Many Requests")
        if _u(prompt, "malformed") < self.malformed_share:
            self._stats["malformed"] += 1
            return '{"entities": [{"name": "cut'
        data = "\n".join(_FENCED.findall(prompt))
        if prompt.startswith("Extract the key entities"):
            ex = self._offline.extract_text("u", data)
            ents = sorted(ex.entities, key=lambda e: (-len(e.name), e.name))[:8]
            names = {e.name for e in ents}
            rels = [
                {
                    "source": r.source,
                    "target": r.target,
                    "description": "co-mentioned",
                    "strength": min(10, int(3 * r.weight) + 3),
                }
                for r in ex.relations
                if r.source in names and r.target in names
            ][:12]
            return json.dumps(
                {
                    "entities": [{"name": e.name, "type": e.type, "description": e.description[:60]} for e in ents],
                    "relations": rels,
                }
            )
        if "community of a knowledge graph" in prompt:
            first = re.search(r"^- ([^:\n]+)", data, re.M)
            name = first.group(1) if first else "topic"
            return json.dumps(
                {
                    "title": f"{name} and related findings",
                    "summary": f"Studies about {name}. They report related mechanisms.",
                }
            )
        if "Two topics" in prompt:
            yes = _u(prompt, "judge") < 0.3
            return "yes - one can influence the other" if yes else "no - only topically similar"
        return "unexpected prompt"

    def _respond(self, prompt: str) -> CompletionResponse:
        text = self._answer(prompt)
        self._answered.append(prompt)  # an answer handed to the caller: it must reach the cache
        return CompletionResponse(text=text)

    async def acomplete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
        await asyncio.sleep(self.latency + self.jitter * (2 * random.random() - 1))
        return self._respond(prompt)

    def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
        time.sleep(self.latency + self.jitter * (2 * random.random() - 1))
        return self._respond(prompt)

    def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponseGen:
        raise NotImplementedError


class HashEmbedding(BaseEmbedding):
    """Hashed bag of words: deterministic, no model."""

    def _vec(self, text: str) -> List[float]:
        v = np.zeros(128)
        for w in re.findall(r"\w+", text.lower()):
            h = int(hashlib.md5(w.encode()).hexdigest(), 16)
            v[h % 128] += 1.0 if (h >> 8) % 2 else -1.0
        v[0] += 1e-3
        return (v / np.linalg.norm(v)).tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vec(text)

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)


def load_articles(path: Path, n: int) -> List[Document]:
    """The first ``n`` articles of a HolisQA domain folder: each article's sentences (file order)
    joined with a space, as the dataset's notes describe."""
    order = [json.loads(line)["article_id"] for line in (path / "articles.jsonl").open(encoding="utf-8")][:n]
    wanted = set(order)
    sents: Dict[str, List[str]] = OrderedDict((a, []) for a in order)
    for line in (path / "sentences.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        if row["article_id"] in wanted:
            sents[row["article_id"]].append(row["text"])
    return [Document(text=" ".join(s), doc_id=a) for a, s in sents.items() if s]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", required=True, type=Path, help="a HolisQA domain folder (articles/sentences.jsonl)")
    ap.add_argument("--articles", type=int, default=100)
    ap.add_argument("--workers", default="1,4,16,32")
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument("--jitter", type=float, default=0.1)
    ap.add_argument("--rate-limit-share", type=float, default=0.05)
    ap.add_argument("--malformed-share", type=float, default=0.01)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "results" / "llm_concurrency")
    args = ap.parse_args()
    docs = load_articles(args.path, args.articles)
    policy = RetryPolicy(base_delay=0.1, max_delay=2.0, timeout=30.0)
    runs, reference = [], None
    for w in [int(x) for x in args.workers.split(",")]:
        llm = RemoteLikeLLM(
            latency=args.latency,
            jitter=args.jitter,
            rate_limit_share=args.rate_limit_share,
            malformed_share=args.malformed_share,
        )
        with tempfile.TemporaryDirectory() as cache_dir:
            t0 = time.perf_counter()
            idx = CausalGraphIndex.from_documents(
                docs,
                llm=llm,
                embed_model=HashEmbedding(),
                show_progress=False,
                cache_dir=cache_dir,
                num_workers=w,
                retry_policy=policy,
            )
            wall = time.perf_counter() - t0
            cache = LLMCache(cache_dir)
            paid = len(cache.calls())
            lost = sum(not cache._path(cache_key(llm, p)).exists() for p in set(llm._answered))
        graph = idx.graph.to_dict()
        llm_s = sum(idx.build_stats["cost"][k]["seconds"] for k in ("extract", "summaries", "gates"))
        reference = reference if reference is not None else graph
        requests = llm._stats["requests"]
        ideal = requests * args.latency / w
        row = {
            "num_workers": w,
            "wall_seconds": round(wall, 2),
            "llm_requests": requests,
            "paid_answers": paid,
            "rate_limited": llm._stats["rate_limited"],
            "malformed": llm._stats["malformed"],
            "ideal_seconds": round(ideal, 2),
            "wall_over_ideal": round(wall / ideal, 3) if ideal else None,
            "answers_lost": lost,
            "llm_stage_seconds": round(llm_s, 2),
            "llm_stages_over_ideal": round(llm_s / ideal, 3) if ideal else None,
            "graph_equals_1_worker": graph == reference,
            "entities": len(idx.graph.entities),
            "modules": len(idx.graph.modules),
            "gates": len(idx.graph.gates),
        }
        runs.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    argv = [f"<HolisQA>/{args.path.name}" if a == str(args.path) else a for a in sys.argv[1:]]  # no local paths
    result = {
        "command": " ".join(["nice -n 10 python benchmarks/scripts/bench_llm_concurrency.py"] + argv),
        "articles": len(docs),
        "units": len(idx.units),
        "latency": args.latency,
        "jitter": args.jitter,
        "rate_limit_share": args.rate_limit_share,
        "malformed_share": args.malformed_share,
        "runs": runs,
    }
    write_results(args.out, result, embed_model=HashEmbedding(), llm=llm)  # the simulated LLM of the last run
    print(
        "| num_workers | wall s | LLM stages s | ideal s | wall / ideal | LLM stages / ideal | LLM requests "
        "| 429s | malformed | lost | same graph |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for r in runs:
        print(
            f"| {r['num_workers']} | {r['wall_seconds']} | {r['llm_stage_seconds']} | {r['ideal_seconds']} "
            f"| {r['wall_over_ideal']} | {r['llm_stages_over_ideal']} "
            f"| {r['llm_requests']} | {r['rate_limited']} | {r['malformed']} | {r['answers_lost']} "
            f"| {'yes' if r['graph_equals_1_worker'] else 'NO'} |"
        )


if __name__ == "__main__":
    main()
