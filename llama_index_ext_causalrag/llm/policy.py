"""The LLM layer's value types: requests, outcomes, the retry policy, the budget and the faults.

The lowest module of the layer: :mod:`~llama_index_ext_causalrag.llm.runner` imports it, and
:mod:`~llama_index_ext_causalrag.llm.io` re-exports both (one direction only, no cycle).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Optional

from llama_index_ext_causalrag.llm.cache import LLMCache
from llama_index_ext_causalrag.llm.parse import DEFAULT_MAX_ANSWER_CHARS
from llama_index_ext_causalrag.llm.resolve import model_name_of


# --------------------------------------------------------------- identity
def has_real_async(llm: Any) -> bool:
    """True when the LLM's class overrides ``acomplete`` (a ``CustomLLM`` only wraps ``complete``)."""
    for cls in type(llm).__mro__:
        if "acomplete" in cls.__dict__:  # the base classes of llama_index.core only wrap complete
            return not cls.__module__.startswith("llama_index.core.")
    return False


def default_num_workers(llm: Any) -> int:
    """8 for an LLM with real ``acomplete``, 1 for a synchronous one."""
    return 8 if has_real_async(llm) else 1


def model_identity(llm: Any) -> List[str]:
    """Class name, ``metadata.model_name`` and :func:`model_name_of` of an LLM (cache-key part)."""
    try:
        meta_name = str(getattr(llm.metadata, "model_name", "") or "")
    except Exception:  # a metadata property that needs a live client
        meta_name = ""
    return [type(llm).__name__, meta_name, model_name_of(llm)]


def cache_key(llm: Any, prompt: str, gen_kwargs: Optional[Dict[str, Any]] = None) -> str:
    """Cache key of one answer: model identity, the full rendered prompt, every generation argument."""
    return LLMCache.key(model_identity(llm), prompt, sorted((gen_kwargs or {}).items()))


# ----------------------------------------------------------------- faults
class LLMCallError(RuntimeError):
    """An LLM call failed after the retries of its :class:`RetryPolicy`."""


class LLMBudgetExceeded(RuntimeError):
    """The next call would exceed ``max_llm_calls`` / ``max_llm_tokens``."""

    def __init__(self, message: str, calls: int = 0, tokens: int = 0) -> None:
        super().__init__(message)
        self.calls, self.tokens = calls, tokens


_TRANSIENT_NAMES = (
    "ratelimit",
    "timeout",
    "apiconnection",
    "serviceunavailable",
    "overloaded",
    "internalserver",
    "badgateway",
    "gatewaytimeout",
    "toomanyrequests",
)


def status_code_of(exc: BaseException) -> Optional[int]:
    for obj in (exc, getattr(exc, "response", None)):
        code = getattr(obj, "status_code", None) or getattr(obj, "status", None)
        if isinstance(code, int):
            return code
    return None


def is_transient(exc: BaseException) -> bool:
    """Rate limit (429, ``openai.RateLimitError``), timeout or server error (5xx): worth a retry.
    Detected by class name and ``status_code``, so no provider SDK is imported."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    code = status_code_of(exc)
    if code is not None and (code in (408, 409, 429) or code >= 500):
        return True
    names = [c.__name__.lower() for c in type(exc).__mro__]
    return any(n in name for name in names for n in _TRANSIENT_NAMES)


def retry_after(exc: BaseException) -> Optional[float]:
    """Seconds from a ``retry_after`` attribute or a ``Retry-After`` header, else None."""
    value = getattr(exc, "retry_after", None)
    if value is None:
        for obj in (exc, getattr(exc, "response", None)):
            headers = getattr(obj, "headers", None)
            if headers:
                try:
                    value = headers.get("retry-after") or headers.get("Retry-After")
                except AttributeError:
                    value = None
                if value is not None:
                    break
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: fall back to backoff


@dataclass
class RetryPolicy:
    """Retries of transient errors: delay ``min(max_delay, base_delay * 2**attempt)`` times a
    random factor in ``[1 - jitter, 1]``, or the server's ``Retry-After`` when it sent one.
    ``timeout`` (seconds, None for none) bounds each call. ``sleep``/``asleep`` are injectable
    (tests). ``malformed_retries``: re-asks after an unparseable answer. ``max_answer_chars``:
    answers are cut to this length before parsing (a runaway answer is not parsed whole)."""

    max_retries: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    jitter: float = 0.5
    timeout: Optional[float] = 120.0
    malformed_retries: int = 1
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS
    sleep: Callable[[float], None] = time.sleep
    asleep: Optional[Callable[[float], Awaitable[None]]] = None
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.malformed_retries < 0:
            raise ValueError(
                f"max_retries and malformed_retries must be >= 0, got "
                f"{self.max_retries!r} and {self.malformed_retries!r}."
            )
        if not isinstance(self.max_answer_chars, int) or self.max_answer_chars < 1:
            raise ValueError(f"max_answer_chars must be an int >= 1, got {self.max_answer_chars!r}.")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {self.timeout!r}.")

    def delay(self, attempt: int, exc: BaseException) -> float:
        ra = retry_after(exc)
        if ra is not None:
            return min(ra, self.max_delay * 5)
        d = min(self.max_delay, self.base_delay * (2**attempt))
        return d * (1.0 - self.jitter * self.rng.random())

    async def async_sleep(self, seconds: float) -> None:
        if self.asleep is not None:
            await self.asleep(seconds)
        elif self.sleep is not time.sleep:
            self.sleep(seconds)
        else:
            await asyncio.sleep(seconds)


@dataclass
class LLMBudget:
    """Caps on paid calls and tokens (prompt + completion) shared by the stages of a build."""

    max_calls: Optional[int] = None
    max_tokens: Optional[int] = None
    calls: int = 0
    tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 0):
                raise ValueError(f"max_llm_{name[4:]} must be an int >= 0 or None, got {v!r}.")

    def reserve(self, prompt_tokens: int) -> None:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise LLMBudgetExceeded(f"max_llm_calls={self.max_calls} reached", self.calls, self.tokens)
            if self.max_tokens is not None and self.tokens + prompt_tokens > self.max_tokens:
                raise LLMBudgetExceeded(
                    f"max_llm_tokens={self.max_tokens} would be exceeded "
                    f"({self.tokens} used, next prompt {prompt_tokens})",
                    self.calls,
                    self.tokens,
                )
            self.calls += 1
            self.tokens += prompt_tokens

    def add(self, completion_tokens: int) -> None:
        with self._lock:
            self.tokens += completion_tokens


# --------------------------------------------------------------- requests
@dataclass
class LLMRequest:
    """One LLM step: ``parse(text, meta)`` returns the value or raises ``ValueError`` (malformed).

    ``meta`` is what ``extract_meta(response)`` returned when the answer arrived (e.g. P(yes)
    from logprobs), cached with the text. ``gen_kwargs`` go to ``complete`` and into the key.
    """

    prompt: str
    parse: Callable[[str, Any], Any]
    retry_suffix: str = "\nReturn ONLY the JSON object."
    gen_kwargs: Dict[str, Any] = field(default_factory=dict)
    extract_meta: Optional[Callable[[Any], Any]] = None
    label: str = ""


@dataclass
class Outcome:
    """``ok``: ``value`` parsed. Else ``error`` says why (malformed twice, or the call failed:
    then ``exception`` is set)."""

    value: Any = None
    ok: bool = False
    error: str = ""
    exception: Optional[BaseException] = None
    from_cache: bool = False


class _Skipped(Exception):
    pass
