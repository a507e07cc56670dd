"""``LLMRunner``: cached, retried, budgeted, concurrent execution of :class:`LLMRequest` s.

Part of the LLM layer; import it from :mod:`llama_index_ext_causalrag.llm.io`. Retries run
through ``tenacity`` (with :class:`RetryPolicy`'s attempts, delays and sleeps), async calls
through LlamaIndex's ``run_jobs``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.async_utils import run_jobs
from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.llm.cache import LLMCache, StageCost
from llama_index_ext_causalrag.llm.parse import cap_answer
from llama_index_ext_causalrag.llm.policy import (
    LLMBudget,
    LLMBudgetExceeded,
    LLMCallError,
    LLMRequest,
    Outcome,
    RetryPolicy,
    _Skipped,
    cache_key,
    default_num_workers,
    has_real_async,
    is_transient,
)
from llama_index_ext_causalrag.llm.resolve import model_name_of
from llama_index_ext_causalrag.text.tokens import count_tokens

logger = logging.getLogger(__name__)

_CLAIM_POLL = 0.05


class LLMRunner:
    """Runs requests for one stage. ``cache=None`` caches nothing (online steps).

    ``on_error="raise"`` (a build) stops at the first call that keeps failing, after the calls
    in flight have finished and been cached; ``"return"`` (online steps) gives that request an
    :class:`Outcome` with the exception, for the step to degrade. A budget overrun always raises.
    """

    def __init__(
        self,
        llm: Any,
        stage: Optional[StageCost] = None,
        cache: Optional[LLMCache] = None,
        policy: Optional[RetryPolicy] = None,
        budget: Optional[LLMBudget] = None,
        num_workers: Optional[int] = None,
        show_progress: bool = False,
        desc: str = "",
        on_error: str = "raise",
        max_answer_chars: Optional[int] = None,
    ) -> None:
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise ValueError(f"num_workers must be an int >= 1 or None, got {num_workers!r}.")
        check_choice(on_error, "on_error", ("raise", "return"))
        self.llm = llm
        self.stage = stage if stage is not None else StageCost()
        self.cache = cache
        self.policy = policy or RetryPolicy()
        self.budget = budget
        self.num_workers = num_workers or default_num_workers(llm)
        self.show_progress = show_progress
        self.desc = desc or self.stage.name or "LLM calls"
        self.on_error = on_error
        self.max_answer_chars = max_answer_chars or self.policy.max_answer_chars
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar: Any = None

    # ------------------------------------------------------------ public
    def run(self, requests: Sequence[LLMRequest]) -> List[Outcome]:
        """Outcomes in request order, whatever the completion order."""
        requests = list(requests)
        if not requests:
            return []
        self._stop.clear()
        if self.num_workers > 1 and has_real_async(self.llm):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(self.arun(requests))
            box: List[Any] = []
            t = threading.Thread(target=lambda: box.append(self._catch(lambda: asyncio.run(self.arun(requests)))))
            t.start()
            t.join()
            return self._unbox(box[0])
        with self._progress(len(requests)):
            if self.num_workers == 1:
                return self._finish([self._guard(self._do, r) for r in requests])
            with ThreadPoolExecutor(self.num_workers) as pool:
                return self._finish(list(pool.map(lambda r: self._guard(self._do, r), requests)))

    async def arun(self, requests: Sequence[LLMRequest]) -> List[Outcome]:
        requests = list(requests)
        if not requests:
            return []
        self._stop.clear()
        real = has_real_async(self.llm)

        async def one(r: LLMRequest) -> Any:
            if self._stop.is_set():
                return _Skipped()
            try:
                return await (self._ado(r) if real else asyncio.to_thread(self._do, r))
            except BaseException as e:  # noqa: BLE001 - sorted out in _finish
                if not isinstance(e, Exception):
                    self._stop.set()
                    raise
                return self._failed(r, e)
            finally:
                self._tick()

        with self._progress(len(requests)):  # our bar (calls, hits, tokens), not run_jobs' own
            return self._finish(list(await run_jobs([one(r) for r in requests], workers=self.num_workers)))

    # --------------------------------------------------------- one request
    def _do(self, req: LLMRequest) -> Outcome:
        last = ""
        for attempt in range(1 + self.policy.malformed_retries):
            prompt = req.prompt if attempt == 0 else req.prompt + req.retry_suffix
            key, text, meta, hit = self._lookup(prompt, req)
            if text is None:
                text, meta = self._pay(key, prompt, req)
            out = self._parse(req, key, text, meta, hit, attempt)
            if isinstance(out, Outcome):
                return out
            last = out
        return self._malformed(req, last)

    async def _ado(self, req: LLMRequest) -> Outcome:
        last = ""
        for attempt in range(1 + self.policy.malformed_retries):
            prompt = req.prompt if attempt == 0 else req.prompt + req.retry_suffix
            key, text, meta, hit = await self._alookup(prompt, req)
            if text is None:
                text, meta = await self._apay(key, prompt, req)
            out = self._parse(req, key, text, meta, hit, attempt)
            if isinstance(out, Outcome):
                return out
            last = out
        return self._malformed(req, last)

    def _parse(self, req: LLMRequest, key: str, text: str, meta: Any, hit: bool, attempt: int) -> Any:
        try:
            value = req.parse(cap_answer(text, self.max_answer_chars), meta)
        except (ValueError, KeyError, TypeError) as e:
            if self.cache is not None and not hit:
                self.cache.put(key, {"text": text, "meta": meta, "malformed": True})
            logger.info(
                "%s: %s gave a malformed answer (attempt %d): %s", self.desc, req.label or "a request", attempt + 1, e
            )
            return str(e)
        return Outcome(value=value, ok=True, from_cache=hit)

    def _malformed(self, req: LLMRequest, error: str) -> Outcome:
        with self._lock:
            self.stage.failures += 1
        return Outcome(error=f"malformed answer: {error}")

    # --------------------------------------------------------------- cache
    def _hit(self, key: str) -> Optional[Tuple[str, Any]]:
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        if hit is None:
            return None
        with self._lock:
            self.stage.cache_hits += 1
        return hit.get("text", ""), hit.get("meta", hit.get("p_yes"))

    def _try_lookup(self, key: str) -> Optional[Tuple[str, Optional[str], Any, bool]]:
        """``(key, text, meta, hit)`` once the answer is cached or ours to pay for; None while
        another worker or process holds its claim."""
        hit = self._hit(key)
        if hit is not None:
            return key, hit[0], hit[1], True
        if self.cache is None:
            return key, None, None, False
        if not self.cache.claim(key):
            return None
        hit = self._hit(key)  # its previous owner may have stored it just before releasing
        if hit is None:
            return key, None, None, False
        self.cache.release(key)
        return key, hit[0], hit[1], True

    def _lookup(self, prompt: str, req: LLMRequest) -> Tuple[str, Optional[str], Any, bool]:
        key = cache_key(self.llm, prompt, req.gen_kwargs)
        while (found := self._try_lookup(key)) is None:
            time.sleep(_CLAIM_POLL)  # another worker or process is paying for this answer
        return found

    async def _alookup(self, prompt: str, req: LLMRequest) -> Tuple[str, Optional[str], Any, bool]:
        key = cache_key(self.llm, prompt, req.gen_kwargs)
        while (found := self._try_lookup(key)) is None:
            await asyncio.sleep(_CLAIM_POLL)
        return found

    # ---------------------------------------------------------------- pay
    def _before(self, prompt: str) -> Tuple[int, float]:
        n = count_tokens(prompt)
        if self.budget is not None:
            self.budget.reserve(n)
        return n, time.perf_counter()

    def _after(self, key: str, prompt_tokens: int, t0: float, response: Any, req: LLMRequest) -> Tuple[str, Any]:
        text = getattr(response, "text", None) or ""
        meta = req.extract_meta(response) if req.extract_meta is not None else None
        if self.cache is not None:
            self.cache.put(key, {"text": text, "meta": meta})  # the moment it arrives
        seconds = time.perf_counter() - t0
        completion_tokens = count_tokens(text)
        if self.budget is not None:
            self.budget.add(completion_tokens)
        with self._lock:
            st = self.stage
            st.calls += 1
            st.prompt_tokens += prompt_tokens
            st.completion_tokens += completion_tokens
        if self.cache is not None:
            self.cache.record_call(self.stage.name, model_name_of(self.llm), prompt_tokens, completion_tokens, seconds)
        return text, meta

    def _retry_args(self) -> Dict[str, Any]:
        """``tenacity`` arguments of :attr:`policy`: ``max_retries + 1`` attempts, transient errors
        only, :meth:`RetryPolicy.delay` between them, the last error re-raised as it is."""
        policy = self.policy
        return dict(
            stop=stop_after_attempt(policy.max_retries + 1),
            retry=retry_if_exception(
                lambda e: not isinstance(e, (LLMBudgetExceeded, LLMCallError)) and is_transient(e)
            ),
            wait=lambda state: policy.delay(state.attempt_number - 1, state.outcome.exception()),
            before_sleep=lambda state: self._on_retry(state.outcome.exception()),
            reraise=True,
        )

    def _pay(self, key: str, prompt: str, req: LLMRequest) -> Tuple[str, Any]:
        try:
            n, t0 = self._before(prompt)
            retrying = Retrying(sleep=self.policy.sleep, **self._retry_args())
            try:
                return retrying(
                    lambda: self._after(
                        key,
                        n,
                        t0,
                        self._complete_sync(prompt, req.gen_kwargs, lambda r: self._late(key, prompt, r, req)),
                        req,
                    )
                )
            except (LLMBudgetExceeded, LLMCallError):
                raise
            except Exception as e:  # noqa: BLE001 - classified in _give_up
                raise self._give_up(e, retrying.statistics.get("attempt_number", 1)) from e
        finally:
            if self.cache is not None:
                self.cache.release(key)

    async def _apay(self, key: str, prompt: str, req: LLMRequest) -> Tuple[str, Any]:
        async def call() -> Tuple[str, Any]:
            coro = self.llm.acomplete(prompt, **req.gen_kwargs)
            response = await (asyncio.wait_for(coro, self.policy.timeout) if self.policy.timeout else coro)
            return self._after(key, n, t0, response, req)

        try:
            n, t0 = self._before(prompt)
            retrying = AsyncRetrying(sleep=self.policy.async_sleep, **self._retry_args())
            try:
                return await retrying(call)
            except (LLMBudgetExceeded, LLMCallError):
                raise
            except Exception as e:  # noqa: BLE001 - classified in _give_up
                raise self._give_up(e, retrying.statistics.get("attempt_number", 1)) from e
        finally:
            if self.cache is not None:
                self.cache.release(key)

    def _on_retry(self, e: BaseException) -> None:
        with self._lock:
            self.stage.retries += 1
        logger.info("%s: transient LLM error (%s: %s); retrying.", self.desc, type(e).__name__, e)

    def _give_up(self, e: Exception, attempts: int) -> LLMCallError:
        if not is_transient(e):
            return LLMCallError(f"{self.desc}: the LLM raised {type(e).__name__}: {e}")
        return LLMCallError(f"{self.desc}: the LLM kept failing ({type(e).__name__}: {e}) after {attempts} attempt(s)")

    def _complete_sync(self, prompt: str, kwargs: Any, late: Any = None) -> Any:
        if not self.policy.timeout:
            return self.llm.complete(prompt, **kwargs)
        box: List[Any] = []
        gave_up = False
        lock = threading.Lock()

        def call() -> None:
            res = self._catch(lambda: self.llm.complete(prompt, **kwargs))
            with lock:
                box.append(res)
                too_late = gave_up
            if too_late and late is not None and res[0] == "ok":
                late(res[1])

        done = threading.Event()
        threading.Thread(target=lambda: (call(), done.set()), daemon=True).start()
        done.wait(self.policy.timeout)
        with lock:
            if not box:
                gave_up = True
        if gave_up:
            raise TimeoutError(f"the LLM gave no answer within timeout={self.policy.timeout}s")
        return self._unbox(box[0])

    def _late(self, key: str, prompt: str, response: Any, req: LLMRequest) -> None:
        """An answer that arrived after its call timed out: paid for, so cached and in the ledger."""
        if self.cache is None or self.cache.get(key) is not None:
            return
        text = getattr(response, "text", None) or ""
        meta = req.extract_meta(response) if req.extract_meta is not None else None
        self.cache.put(key, {"text": text, "meta": meta})
        self.cache.record_call(
            self.stage.name,
            model_name_of(self.llm),
            count_tokens(prompt),
            count_tokens(text),
            self.policy.timeout or 0.0,
        )

    # ------------------------------------------------------------ plumbing
    @staticmethod
    def _catch(fn: Any) -> Any:
        try:
            return ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - re-raised by _unbox
            return ("err", e)

    @staticmethod
    def _unbox(box: Any) -> Any:
        if box[0] == "err":
            raise box[1]
        return box[1]

    def _guard(self, fn: Any, req: LLMRequest) -> Any:
        if self._stop.is_set():
            return _Skipped()
        try:
            return fn(req)
        except Exception as e:  # noqa: BLE001 - sorted out in _finish
            return self._failed(req, e)
        except BaseException:
            self._stop.set()
            raise
        finally:
            self._tick()

    def _tick(self) -> None:
        if self._bar is not None:
            with self._lock:
                st = self.stage
                self._bar.set_postfix(
                    calls=st.calls, hits=st.cache_hits, tokens=st.prompt_tokens + st.completion_tokens, refresh=False
                )
                self._bar.update(1)

    def _failed(self, req: LLMRequest, e: Exception) -> Any:
        if self.on_error == "raise" or isinstance(e, LLMBudgetExceeded):
            self._stop.set()
        return e

    def _finish(self, results: List[Any]) -> List[Outcome]:
        for r in results:
            if isinstance(r, LLMBudgetExceeded) or (
                isinstance(r, Exception) and not isinstance(r, _Skipped) and self.on_error == "raise"
            ):
                raise r
        out = []
        for r in results:
            if isinstance(r, Outcome):
                out.append(r)
            else:
                out.append(Outcome(error=f"LLM call failed: {r}", exception=r))
        return out

    def _progress(self, total: int) -> Any:
        runner = self

        class _Ctx:
            def __enter__(self) -> None:
                if runner.show_progress:
                    from tqdm.auto import tqdm

                    runner._bar = tqdm(total=total, desc=runner.desc, unit="req")

            def __exit__(self, *exc: Any) -> None:
                if runner._bar is not None:
                    runner._bar.close()
                    runner._bar = None

        return _Ctx()
