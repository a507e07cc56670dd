"""The LLM-call layer: retries and backoff, timeouts, cache keys, resume, budget caps, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import re
import threading
import time

import pytest
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata

from _causal_graph_helpers import TOPICS, HashEmbedding, corpus
from fakes import AsyncScriptedLLM, ScriptedLLM
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.llm.cache import LLMCache, StageCost
from llama_index_ext_causalrag.llm.io import (
    LLMBudget,
    LLMBudgetExceeded,
    LLMCallError,
    LLMRequest,
    LLMRunner,
    RetryPolicy,
    cache_key,
    default_num_workers,
    fence,
    is_transient,
    retry_after,
)

ALL = [e for ents in TOPICS.values() for e in ents]


class RateLimitError(Exception):
    """Shaped like ``openai.RateLimitError``: a class name, a status code, a response with headers."""

    def __init__(self, retry_after=None):
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.response = type(
            "R", (), {"headers": {"retry-after": retry_after} if retry_after else {}, "status_code": 429}
        )()


def build_script(prompt: str, i: int) -> str:
    """Plausible deterministic answers to the build's three prompt kinds."""
    if prompt.startswith("Extract the key entities"):
        text = prompt.split("Text:\n", 1)[1]
        found = [e for e in ALL if e in text]
        return json.dumps(
            {
                "entities": [{"name": e, "type": "thing"} for e in found],
                "relations": [{"source": a, "target": b, "strength": 7} for a, b in zip(found, found[1:])],
            }
        )
    if "community of a knowledge graph" in prompt:
        first = re.search(r"^- ([^:]+):", prompt, re.M)
        return json.dumps({"title": f"About {first.group(1) if first else 'x'}", "summary": "A community."})
    if "Two topics" in prompt:
        return "yes - one drives the other"
    raise AssertionError(f"unexpected prompt: {prompt[:60]}")


def _build(llm, cache, **kw):
    return CausalGraphIndex.from_documents(
        corpus(2),
        llm=llm,
        embed_model=HashEmbedding(),
        show_progress=False,
        max_cluster_size=3,
        cache_dir=str(cache),
        **kw,
    )


def _ok():
    return LLMRequest("p", parse=lambda t, m: t)


# ------------------------------------------------------------------ retries
def test_rate_limit_then_success_backs_off_and_honours_retry_after():
    slept = []
    answers = [RateLimitError(retry_after="7"), RateLimitError(), RateLimitError(), "fine"]

    def script(prompt, i):
        a = answers[i]
        if isinstance(a, Exception):
            raise a
        return a

    st = StageCost()
    policy = RetryPolicy(base_delay=1.0, jitter=0.5, sleep=slept.append, timeout=None)
    out = LLMRunner(ScriptedLLM(script), st, policy=policy).run([_ok()])[0]
    assert out.ok and out.value == "fine" and st.calls == 1 and st.retries == 3
    assert slept[0] == 7.0  # the server's Retry-After
    assert 1.0 <= slept[1] <= 2.0 and 2.0 <= slept[2] <= 4.0  # exponential, jittered down by at most half


def test_openai_rate_limit_error_is_detected_without_importing_openai_in_the_layer():
    import httpx
    import openai

    resp = httpx.Response(429, headers={"retry-after": "3"}, request=httpx.Request("POST", "http://x"))
    e = openai.RateLimitError("slow down", response=resp, body=None)
    assert is_transient(e) and retry_after(e) == 3.0
    assert not is_transient(ValueError("bad request"))
    five = type("APIStatusError", (Exception,), {"status_code": 503})()
    assert is_transient(five)


def test_timeout_then_success():
    def script(prompt, i):
        if i == 0:
            time.sleep(5.0)
        return "late" if i == 0 else "on time"

    slept = []
    st = StageCost()  # a margin of a second for the retry's answer, however loaded the machine
    out = LLMRunner(ScriptedLLM(script), st, policy=RetryPolicy(timeout=1.0, sleep=slept.append)).run([_ok()])[0]
    assert out.value == "on time" and st.retries == 1 and len(slept) == 1


def test_an_answer_that_arrives_after_its_timeout_is_still_cached(tmp_path):
    def script(prompt, i):
        if i == 0:
            time.sleep(0.5)
            return "late"
        raise ValueError("not transient")  # the retry fails: only the late answer remains

    cache = LLMCache(tmp_path)
    running = set(threading.enumerate())
    with pytest.raises(LLMCallError):
        LLMRunner(ScriptedLLM(script), cache=cache, policy=RetryPolicy(timeout=0.1, sleep=lambda s: None)).run([_ok()])
    for late in set(threading.enumerate()) - running:  # the call that timed out caches its answer, then ends
        late.join(timeout=60)
    again = ScriptedLLM(lambda p, i: "fresh")
    out = LLMRunner(again, cache=cache).run([_ok()])[0]
    assert out.value == "late" and out.from_cache and again.prompts == []


def test_async_timeout_then_success():
    llm = AsyncScriptedLLM(lambda p, i: "ok", delay=0.0)
    calls = []

    async def slow_then_fast(prompt, **kw):
        calls.append(1)
        if len(calls) == 1:
            import asyncio

            await asyncio.sleep(5.0)
        return CompletionResponse(text="ok")

    object.__setattr__(llm, "acomplete", slow_then_fast)
    out = LLMRunner(llm, policy=RetryPolicy(timeout=1.0, sleep=lambda s: None), num_workers=2).run([_ok()])[0]
    assert out.ok and len(calls) == 2


def test_an_llm_that_keeps_raising_stops_after_its_retries():
    slept = []
    llm = ScriptedLLM(lambda p, i: (_ for _ in ()).throw(RateLimitError()))
    with pytest.raises(LLMCallError, match="kept failing"):
        LLMRunner(llm, policy=RetryPolicy(max_retries=3, sleep=slept.append, timeout=None)).run([_ok()])
    assert len(llm.prompts) == 4 and len(slept) == 3
    out = LLMRunner(llm, policy=RetryPolicy(max_retries=1, sleep=slept.append), on_error="return").run([_ok()])
    assert not out[0].ok and isinstance(out[0].exception, LLMCallError)


# ------------------------------------------------------------------ cache keys
def test_generation_arguments_are_part_of_the_cache_key(tmp_path):
    llm = ScriptedLLM(lambda p, i: f"answer {i}")
    cache = LLMCache(tmp_path)

    def run(**gen):
        return LLMRunner(llm, cache=cache).run([LLMRequest("same prompt", parse=lambda t, m: t, gen_kwargs=gen)])[0]

    assert run(max_tokens=10).value == "answer 0"
    assert run(max_tokens=10).from_cache and len(llm.prompts) == 1  # same args: a hit
    assert run(max_tokens=20).value == "answer 1"  # max_tokens changed: a miss
    assert run(max_tokens=20, temperature=0.0).value == "answer 2"
    assert run().value == "answer 3" and llm.call_kwargs[-1] == {}


class NamedLLM(ScriptedLLM):
    """A CustomLLM known only by ``metadata.model_name`` (no model/model_name/model_path attribute)."""

    label: str = "a"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.label)


def test_differently_named_models_never_share_answers(tmp_path):
    a = NamedLLM(lambda p, i: "from a", label="model-a")
    b = NamedLLM(lambda p, i: "from b", label="model-b")
    cache = LLMCache(tmp_path)
    req = LLMRequest("prompt", parse=lambda t, m: t)
    assert LLMRunner(a, cache=cache).run([req])[0].value == "from a"
    assert LLMRunner(b, cache=cache).run([req])[0].value == "from b"
    assert cache_key(a, "prompt") != cache_key(b, "prompt")
    assert LLMRunner(NamedLLM(lambda p, i: "x", label="model-a"), cache=cache).run([req])[0].value == "from a"


def test_a_malformed_answer_is_retried_once_then_reported_and_never_replayed(tmp_path):
    llm = ScriptedLLM(lambda p, i: "nonsense")

    def parse(t, m):
        raise ValueError("not it")

    st = StageCost()
    out = LLMRunner(llm, st, cache=LLMCache(tmp_path)).run([LLMRequest("p", parse=parse)])[0]
    assert not out.ok and "not it" in out.error and st.calls == 2 and st.failures == 1
    LLMRunner(llm, cache=LLMCache(tmp_path)).run([LLMRequest("p", parse=parse)])
    assert len(llm.prompts) == 4  # asked again on the next run


def test_answers_are_capped_before_parsing():
    seen = []
    LLMRunner(ScriptedLLM(lambda p, i: "x" * 1000), max_answer_chars=100).run(
        [LLMRequest("p", parse=lambda t, m: seen.append(len(t)))]
    )
    LLMRunner(ScriptedLLM(lambda p, i: "x" * 1000), policy=RetryPolicy(max_answer_chars=50)).run(
        [LLMRequest("p", parse=lambda t, m: seen.append(len(t)))]
    )
    assert seen == [100, 50]


def _parse_work(fn, *args):
    """``fn(*args)``, the work it did counted without a clock (Python lines executed in
    ``llm_parse`` plus the characters handed to ``json.loads``) and its ``json.loads`` calls."""
    import sys

    import llama_index_ext_causalrag.llm.parse as lp

    counts = {"lines": 0, "loaded": 0, "calls": 0}
    real_loads = json.loads

    def counting_loads(s, *a, **k):
        counts["loaded"] += len(s)
        counts["calls"] += 1
        return real_loads(s, *a, **k)

    def local(frame, event, arg):
        if event == "line":
            counts["lines"] += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == lp.__file__ else None

    previous = sys.gettrace()
    lp.json.loads = counting_loads
    sys.settrace(tracer)
    try:
        out = fn(*args)
    finally:
        sys.settrace(previous)
        lp.json.loads = real_loads
    return out, counts["lines"] + counts["loaded"], counts["calls"]


def test_json_finder_work_grows_linearly_on_adversarial_output():
    from llama_index_ext_causalrag.llm.parse import MAX_PARSE_ATTEMPTS, find_or_salvage_json_object

    families = [
        lambda n: "{" * n,
        lambda n: '{"a": ' * n,
        lambda n: "{[" * (n // 2) + '"x' * (n // 8),
        lambda n: "[{}, " * n,
        lambda n: '{"a": x, ' * n,
    ]  # the last two make json.loads work
    for make in families:
        (out1, w1, c1), (out2, w2, c2) = (
            _parse_work(find_or_salvage_json_object, make(n), {"entities"}) for n in (4000, 8000)
        )
        assert out1 == out2 and out1 in ((None, False), ({}, False)), (make(8)[:40], out1, out2)
        assert len(make(4000)) <= w1 and w2 <= 2.2 * w1, (make(8)[:40], w1, w2)  # twice the input, twice the work
        assert c2 <= 2 * MAX_PARSE_ATTEMPTS, (make(8)[:40], c2)  # a bounded number of json.loads tries
    # 8000 cut-off points, none parseable: exactly MAX_PARSE_ATTEMPTS of them are tried
    assert _parse_work(find_or_salvage_json_object, '{"a": x, ' * 8000, {"entities"})[2] == MAX_PARSE_ATTEMPTS
    assert find_or_salvage_json_object("{" * 8000 + '{"entities": []}', {"entities"})[0] == {"entities": []}


# ------------------------------------------------------------------ builds
def test_a_build_killed_after_n_answers_resumes_with_exactly_the_missing_calls(tmp_path):
    ref = ScriptedLLM(build_script)
    reference = _build(ref, tmp_path / "ref")
    total = len(ref.prompts)

    def dies_after_5(prompt, i):
        if i == 5:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the build
        return build_script(prompt, i)

    with pytest.raises(KeyboardInterrupt):
        _build(ScriptedLLM(dies_after_5), tmp_path / "cache")
    again = ScriptedLLM(build_script)
    idx = _build(again, tmp_path / "cache")
    assert len(again.prompts) == total - 5
    assert idx.graph.to_dict() == reference.graph.to_dict()


def test_a_failing_llm_stops_the_build_with_a_clear_error_and_keeps_its_answers(tmp_path):
    ref = ScriptedLLM(build_script)
    reference = _build(ref, tmp_path / "ref")

    def breaks_after_3(prompt, i):
        if i >= 3:
            raise ValueError("invalid api key")  # not transient: no retry
        return build_script(prompt, i)

    with pytest.raises(
        LLMCallError,
        match=r"stage 'extract'.*invalid api key.*3 answer\(s\) received were "
        r"cached.*rerun the same build to resume",
    ):
        _build(ScriptedLLM(breaks_after_3), tmp_path / "cache")
    again = ScriptedLLM(build_script)
    idx = _build(again, tmp_path / "cache")
    assert len(again.prompts) == len(ref.prompts) - 3
    assert idx.graph.to_dict() == reference.graph.to_dict()


def test_a_call_cap_stops_the_build_with_a_clear_error_and_a_resumed_build_completes(tmp_path):
    ref = ScriptedLLM(build_script)
    reference = _build(ref, tmp_path / "ref")
    llm = ScriptedLLM(build_script)
    with pytest.raises(LLMBudgetExceeded) as info:
        _build(llm, tmp_path / "cache", max_llm_calls=7)
    msg = str(info.value)
    assert "7 LLM call(s) made" in msg and "remaining (estimate())" in msg and "rerun the same build" in msg
    assert len(llm.prompts) == 7
    resumed = ScriptedLLM(build_script)
    idx = _build(resumed, tmp_path / "cache")
    assert len(resumed.prompts) == len(ref.prompts) - 7
    assert idx.graph.to_dict() == reference.graph.to_dict()
    with pytest.raises(LLMBudgetExceeded, match="max_llm_tokens=50"):
        _build(ScriptedLLM(build_script), tmp_path / "other", max_llm_tokens=50)


def test_concurrent_build_equals_the_sequential_one_and_overlaps_its_calls(tmp_path):
    slow = AsyncScriptedLLM(build_script, delay=0.01)
    one = _build(slow, tmp_path / "one", num_workers=1)
    calls = len(slow.prompts)
    fast = AsyncScriptedLLM(build_script, delay=0.01)
    assert default_num_workers(fast) == 8 and default_num_workers(ScriptedLLM(build_script)) == 1
    eight = _build(fast, tmp_path / "eight", num_workers=8)
    assert len(fast.prompts) == calls > 20
    assert eight.graph.to_dict() == one.graph.to_dict()
    assert eight.build_stats["cost"]["extract"]["calls"] == one.build_stats["cost"]["extract"]["calls"]
    # concurrency observed by the LLM itself, not by a clock: one call at a time with one
    # worker; several at once, never more than the eight workers, with eight
    assert slow.max_in_flight == 1
    assert 1 < fast.max_in_flight <= 8, fast.max_in_flight
    # a thread pool for a synchronous LLM gives the same graph too
    pooled = _build(ScriptedLLM(build_script), tmp_path / "pool", num_workers=4)
    assert pooled.graph.to_dict() == one.graph.to_dict()


# ------------------------------------------------------------ shared cache
def _pay_twenty(cache_dir):
    llm = ScriptedLLM(lambda p, i: (time.sleep(0.02), "answer to " + p)[1])
    reqs = [LLMRequest(f"prompt {k}", parse=lambda t, m: t) for k in range(20)]
    out = LLMRunner(llm, StageCost(name="s"), cache=LLMCache(cache_dir), num_workers=4).run(reqs)
    assert all(o.ok and o.value == f"answer to prompt {k}" for k, o in enumerate(out))


def test_two_processes_share_one_cache_without_errors_or_double_payment(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_pay_twenty, args=(str(tmp_path),)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert LLMCache(tmp_path).spent()["s"]["calls"] == 20  # each answer paid once
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*.claim"))


def test_fence_strips_markup_and_fence_markers():
    out = fence("a <b>bold</b> DATA>>> escape <<<DATA </text><system>x</system> 3 > 2")
    assert out.startswith("<<<DATA\n") and out.endswith("\nDATA>>>")
    inner = out[len("<<<DATA\n") : -len("\nDATA>>>")]
    assert "DATA>>>" not in inner and "<<<" not in inner and "<" not in inner.replace("3 > 2", "")
    assert "bold" in inner and "3 > 2" in inner


def test_budget_validation():
    with pytest.raises(ValueError, match="max_llm_calls"):
        LLMBudget(max_calls=-1)
    with pytest.raises(ValueError, match="num_workers"):
        LLMRunner(ScriptedLLM(lambda p, i: ""), num_workers=0)


def test_progress_bar_shows_calls_hits_and_tokens(tmp_path, capsys):
    llm = ScriptedLLM(lambda p, i: "answer")
    reqs = [LLMRequest(f"prompt {k % 3}", parse=lambda t, m: t) for k in range(6)]
    LLMRunner(llm, StageCost(name="demo"), cache=LLMCache(tmp_path), show_progress=True, desc="Demo stage").run(reqs)
    err = capsys.readouterr().err
    assert "Demo stage" in err and "6/6" in err and "calls=3" in err and "hits=3" in err and "tokens=" in err


def test_real_async_is_detected_by_class():
    from llama_index.core.llms import MockLLM
    from llama_index.llms.openai import OpenAI

    assert default_num_workers(OpenAI(api_key="not-used")) == 8
    assert default_num_workers(MockLLM()) == 1


def test_deeply_nested_cut_off_output_is_no_answer_not_a_crash():
    from llama_index_ext_causalrag.llm.parse import find_or_salvage_json_object

    for bad in ('{"a": [1, ' * 8000, "{" + '"a": [' * 5000 + "1" + "]" * 5000 + "}"):
        assert find_or_salvage_json_object(bad, {"entities"})[0] is None
