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
import uuid
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
    name: str = ""  # the stage the calls are recorded under in the cache's ledger
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
        return self.stages.setdefault(name, StageCost(name=name))

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
            del v["name"]
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
    """One JSON file per answer under ``cache_dir/<key[:2]>/<key>.json``, and a ledger of paid calls.

    The ledger (``cache_dir/calls.jsonl``) gets one line per LLM call actually made, retries and
    unparseable answers included, so ``spent()`` is what the cache cost to fill, summed over every
    build, interrupted or not, and over every machine whose export was imported.
    """

    LEDGER = "calls.jsonl"

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

    def record_call(self, stage: str, model: str, prompt_tokens: int, completion_tokens: int,
                    seconds: float) -> None:
        """Append one paid call to the ledger."""
        self._append_calls([{"id": uuid.uuid4().hex, "stage": stage, "model": model, "prompt_tokens": prompt_tokens,
                             "completion_tokens": completion_tokens, "seconds": round(seconds, 3)}])

    def _append_calls(self, rows: List[Dict[str, Any]]) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / self.LEDGER, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(row, sort_keys=True) + "\n" for row in rows)

    def calls(self) -> List[Dict[str, Any]]:
        p = self.cache_dir / self.LEDGER
        if not p.exists():
            return []
        rows = []
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a killed process
                logger.warning("LLM cache ledger %s has an unreadable line; it is not counted.", p)
        return rows

    def spent(self) -> Dict[str, Dict[str, float]]:
        """Per stage: LLM calls, prompt and completion tokens and seconds recorded in the ledger."""
        out: Dict[str, Dict[str, float]] = {}
        for row in self.calls():
            s = out.setdefault(row.get("stage", ""), {"calls": 0, "prompt_tokens": 0,
                                                      "completion_tokens": 0, "seconds": 0.0})
            s["calls"] += 1
            s["prompt_tokens"] += row.get("prompt_tokens", 0)
            s["completion_tokens"] += row.get("completion_tokens", 0)
            s["seconds"] += row.get("seconds", 0.0)
        return out

    def export_jsonl(self, path: str | Path) -> int:
        """Write every cached answer (sorted by key), then the ledger, to one JSON Lines file.

        Returns the number of answers. One file moves the cache to another machine (or keeps it in
        version control) so that a build there makes no call that was already paid for here.
        """
        lines = []
        for f in sorted(self.cache_dir.glob("??/*.json")):  # nothing when the directory does not exist
            value = self.get(f.stem)
            if value is not None:
                lines.append(json.dumps({"key": f.stem, "value": value}, ensure_ascii=False, sort_keys=True))
        answers = len(lines)
        lines += [json.dumps({"call": row}, sort_keys=True) for row in self.calls()]
        Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return answers

    def import_jsonl(self, path: str | Path) -> int:
        """Add the answers and ledger lines of an ``export_jsonl`` file that this cache lacks.

        Returns how many answers were added.
        """
        added = 0
        known = {row.get("id") for row in self.calls()}
        new_calls = []
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if "call" in row:
                    if row["call"]["id"] not in known:
                        known.add(row["call"]["id"])
                        new_calls.append(row["call"])
                    continue
                key, value = row["key"], row["value"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}, line {n}: not an LLM cache entry ({e}); "
                                 "expected a file written by LLMCache.export_jsonl.") from e
            if self.get(key) is None:
                self.put(key, value)
                added += 1
        if new_calls:
            self._append_calls(new_calls)
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
    t0 = time.perf_counter()
    response = llm.complete(prompt, **kwargs)
    seconds = time.perf_counter() - t0
    text = response.text or ""
    prompt_tokens, completion_tokens = count_tokens(prompt), count_tokens(text)
    stage.calls += 1
    stage.prompt_tokens += prompt_tokens
    stage.completion_tokens += completion_tokens
    cache.record_call(stage.name, model_name_of(llm), prompt_tokens, completion_tokens, seconds)
    p_yes = p_yes_from_response(response) if want_logprobs else None
    return text, p_yes, False


def store(cache: LLMCache, llm: LLM, template: str, cache_input: str, text: str,
          p_yes: Optional[float] = None) -> None:
    cache.put(LLMCache.key(model_name_of(llm), template, cache_input), {"text": text, "p_yes": p_yes})
