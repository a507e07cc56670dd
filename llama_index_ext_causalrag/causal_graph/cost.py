"""Cost accounting and the on-disk LLM answer cache shared by extraction, summaries and gates.

Every LLM answer is stored as one JSON file keyed by sha256(model, prompt-template hash,
input hash), so a rebuild of the same corpus with the same model and prompts makes no call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from llama_index.core.llms import LLM

from llama_index_ext_causalrag.defaults import model_name_of
from llama_index_ext_causalrag.spans import parse_json_object  # noqa: F401  (re-exported)
from llama_index_ext_causalrag.tokens import count_tokens

logger = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path(
    os.environ.get("CAUSALRAG_CACHE_DIR", str(Path.home() / ".cache" / "llama_index_ext_causalrag"))
) / "llm"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class StageCost:
    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class CostTracker:
    """LLM calls, tokens and wall-clock seconds per build stage."""

    stages: Dict[str, StageCost] = field(default_factory=dict)

    def stage(self, name: str) -> StageCost:
        return self.stages.setdefault(name, StageCost())

    @contextmanager
    def timed(self, name: str) -> Iterator[StageCost]:
        st = self.stage(name)
        t0 = time.perf_counter()
        try:
            yield st
        finally:
            st.seconds += time.perf_counter() - t0

    @property
    def total_calls(self) -> int:
        return sum(s.calls for s in self.stages.values())

    def to_dict(self) -> Dict[str, Any]:
        out = {k: asdict(v) for k, v in self.stages.items()}
        for v in out.values():
            v["seconds"] = round(v["seconds"], 3)
        return out

    def table(self) -> str:
        lines = ["| stage | seconds | LLM calls | cache hits | failures | prompt tok | completion tok |",
                 "|---|---:|---:|---:|---:|---:|---:|"]
        for k, s in self.stages.items():
            lines.append(f"| {k} | {s.seconds:.1f} | {s.calls} | {s.cache_hits} | {s.failures} "
                         f"| {s.prompt_tokens} | {s.completion_tokens} |")
        return "\n".join(lines)


class LLMCache:
    """One JSON file per answer under ``cache_dir/<key[:2]>/<key>.json``."""

    def __init__(self, cache_dir: Optional[str | Path] = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR

    @staticmethod
    def key(model: str, prompt_template: str, text: str) -> str:
        return sha(json.dumps([model, sha(prompt_template), sha(text)]))

    def _path(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        p = self._path(key)
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            logger.warning("LLM cache entry %s is unreadable; it will be recomputed.", p)
            return None

    def put(self, key: str, value: Dict[str, Any]) -> None:
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(value, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        tmp.replace(p)

    def export_jsonl(self, path: str | Path) -> int:
        """Write every cached answer to one JSON Lines file, sorted by key; returns the count.

        One file moves the cache to another machine (or keeps it in version control) so that a
        build there makes no call that was already paid for here.
        """
        lines = []
        for f in sorted(self.cache_dir.glob("??/*.json")):  # nothing when the directory does not exist
            value = self.get(f.stem)
            if value is not None:
                lines.append(json.dumps({"key": f.stem, "value": value}, ensure_ascii=False, sort_keys=True))
        Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return len(lines)

    def import_jsonl(self, path: str | Path) -> int:
        """Add the answers of an ``export_jsonl`` file that this cache lacks; returns how many."""
        added = 0
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key, value = row["key"], row["value"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}, line {n}: not an LLM cache entry ({e}); "
                                 "expected a file written by LLMCache.export_jsonl.") from e
            if self.get(key) is None:
                self.put(key, value)
                added += 1
        return added


def p_yes_from_response(response: Any) -> Optional[float]:
    """P(yes) / (P(yes) + P(no)) at the first answer token, when the LLM returned logprobs.

    Reads LlamaIndex ``CompletionResponse.logprobs`` (OpenAI-style) or a llama.cpp raw
    ``choices[0].logprobs.top_logprobs``. Returns ``None`` when neither is there.
    """
    candidates: List[Dict[str, float]] = []
    lps = getattr(response, "logprobs", None)
    if lps:
        for position in lps[:3]:
            candidates.append({lp.token: lp.logprob for lp in position})
    raw = getattr(response, "raw", None)
    if not candidates and isinstance(raw, dict):
        try:
            top = raw["choices"][0]["logprobs"]["top_logprobs"]
            candidates = [dict(t) for t in top[:3] if t]
        except (KeyError, IndexError, TypeError):
            pass
    for dist in candidates:
        yes = sum(math.exp(v) for k, v in dist.items() if k.strip().lower() in ("yes", "y"))
        no = sum(math.exp(v) for k, v in dist.items() if k.strip().lower() in ("no", "n"))
        if yes + no > 0:
            return yes / (yes + no)
    return None


def cached_complete(
    llm: LLM,
    prompt: str,
    *,
    template: str,
    cache_input: str,
    stage: StageCost,
    cache: LLMCache,
    want_logprobs: bool = False,
    **kwargs: Any,
) -> Tuple[str, Optional[float], bool]:
    """``(text, p_yes, from_cache)``. Calls are counted in ``stage`` only on a cache miss.

    The answer is NOT written to the cache here: callers store it once it parsed, so that a
    malformed answer is retried on the next build instead of being replayed forever.
    """
    key = LLMCache.key(model_name_of(llm), template, cache_input)
    hit = cache.get(key)
    if hit is not None:
        stage.cache_hits += 1
        return hit["text"], hit.get("p_yes"), True
    response = llm.complete(prompt, **kwargs)
    text = response.text or ""
    stage.calls += 1
    stage.prompt_tokens += count_tokens(prompt)
    stage.completion_tokens += count_tokens(text)
    p_yes = p_yes_from_response(response) if want_logprobs else None
    return text, p_yes, False


def store(cache: LLMCache, llm: LLM, template: str, cache_input: str, text: str,
          p_yes: Optional[float] = None) -> None:
    cache.put(LLMCache.key(model_name_of(llm), template, cache_input), {"text": text, "p_yes": p_yes})
