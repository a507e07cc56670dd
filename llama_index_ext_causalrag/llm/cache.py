"""The on-disk LLM answer cache, its ledger of paid calls, and per-stage cost accounting.

Every LLM answer is one JSON file keyed by sha256 of (model, full rendered prompt, generation
arguments) -- see :func:`llama_index_ext_causalrag.llm.io.cache_key` -- so a rebuild of the same
corpus with the same model, prompts and arguments makes no call. Writes are atomic (a unique
temporary file, then ``os.replace``), so several processes can share one cache directory, and a
claim file per answer in flight keeps two of them from paying for the same answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

logger = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = (
    Path(os.environ.get("CAUSALRAG_CACHE_DIR", str(Path.home() / ".cache" / "llama_index_ext_causalrag"))) / "llm"
)


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
    retries: int = 0  # calls repeated after a rate limit, timeout or server error


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
        lines = [
            "| stage | seconds | LLM calls | cache hits | failures | prompt tok | completion tok |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for k, s in self.stages.items():
            lines.append(
                f"| {k} | {s.seconds:.1f} | {s.calls} | {s.cache_hits} | {s.failures} "
                f"| {s.prompt_tokens} | {s.completion_tokens} |"
            )
        return "\n".join(lines)


_KEY = re.compile(r"[0-9a-f]{64}")
_HOST = socket.gethostname()


def _claim_owner(path: Path) -> Optional[Tuple[int, str]]:
    """``(pid, host)`` recorded in a claim file (None when unreadable)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return int(raw["pid"]), str(raw["host"])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, owned by someone else
    return True


class LLMCache:
    """One JSON file per answer under ``cache_dir/<key[:2]>/<key>.json``, and a ledger of paid calls.

    The ledger (``cache_dir/calls.jsonl``) gets one line per LLM call actually made, retries and
    unparseable answers included, so ``spent()`` is what the cache cost to fill, summed over every
    build, interrupted or not, and over every machine whose export was imported.

    ``claim(key)`` / ``release(key)`` mark an answer in flight with a ``<key>.claim`` file that
    records the claiming process and host. A claim of a process of this host that no longer
    exists is taken over at once (a resumed build after a kill repeats no wait), one of another
    host once it is older than ``claim_ttl`` seconds; either is logged.
    """

    LEDGER = "calls.jsonl"

    def __init__(self, cache_dir: Optional[str | Path] = None, claim_ttl: float = 600.0) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
        self.claim_ttl = claim_ttl
        self._lock = threading.Lock()

    @staticmethod
    def key(*parts: Any) -> str:
        """sha256 of the JSON list of ``parts`` (model, prompt, arguments...)."""
        return sha(json.dumps(list(parts), sort_keys=True, ensure_ascii=False, default=str))

    def _path(self, key: str, suffix: str = ".json") -> Path:
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            # keys are data (an imported export, a caller): never a path of their own
            raise ValueError(f"LLM cache key {key!r} is not a cache key (64 hex digits, as LLMCache.key makes).")
        return self.cache_dir / key[:2] / f"{key}{suffix}"

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        p = self._path(key)
        try:
            value = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            logger.warning("LLM cache entry %s is unreadable; it will be recomputed.", p)
            return None
        if not isinstance(value, dict) or value.get("malformed"):
            return None  # an unparseable answer is kept for the record, never replayed
        return value

    def put(self, key: str, value: Dict[str, Any]) -> None:
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f"{p.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")  # unique per writer
        tmp.write_text(json.dumps(value, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        os.replace(tmp, p)

    # -------------------------------------------------------------- claims
    def claim(self, key: str) -> bool:
        """True when this process may pay for ``key``; False while another one holds a live claim."""
        p = self._path(key, ".claim")
        p.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    age = time.time() - p.stat().st_mtime
                    owner = _claim_owner(p)
                except FileNotFoundError:
                    continue  # released meanwhile: try again
                dead = owner is not None and owner[1] == _HOST and not _alive(owner[0])
                if age < self.claim_ttl and not dead:
                    return False
                logger.warning(
                    "LLM cache: taking over the claim on answer %s of %s (%s).",
                    key[:12],
                    f"process {owner[0]} on {owner[1]}" if owner else "an unknown process",
                    "that process is gone" if dead else f"the claim is {age:.0f} s old, older than claim_ttl",
                )
                try:
                    p.unlink()
                except FileNotFoundError:
                    pass
                continue
            os.write(fd, json.dumps({"pid": os.getpid(), "host": _HOST}).encode())
            os.close(fd)
            return True
        return False

    def release(self, key: str) -> None:
        try:
            self._path(key, ".claim").unlink()
        except FileNotFoundError:
            pass

    # -------------------------------------------------------------- ledger
    def record_call(self, stage: str, model: str, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        """Append one paid call to the ledger."""
        self._append_calls(
            [
                {
                    "id": uuid.uuid4().hex,
                    "stage": stage,
                    "model": model,
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "seconds": round(seconds, 3),
                }
            ]
        )

    def _append_calls(self, rows: List[Dict[str, Any]]) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        with self._lock, open(self.cache_dir / self.LEDGER, "a", encoding="utf-8") as f:
            f.write(data)

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
            s = out.setdefault(
                row.get("stage", ""), {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}
            )
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
                if not isinstance(key, str) or not _KEY.fullmatch(key) or not isinstance(value, dict):
                    raise TypeError(f"key {key!r} is not a cache key, or its value is not an object")
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(
                    f"{path}, line {n}: not an LLM cache entry ({e}); expected a file written by LLMCache.export_jsonl."
                ) from e
            if self.get(key) is None:
                self.put(key, value)
                added += 1
        if new_calls:
            self._append_calls(new_calls)
        return added
