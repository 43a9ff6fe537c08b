"""OpenAIGenerator over httpx.MockTransport: parsing, usage, retries, fail-fast 4xx, concurrency bound, timeouts."""

import asyncio
import json
import math

import httpx
import pytest

from metamod.llm import BackendConfig, SamplingConfig, build_generator
from metamod.llm.openai_backend import BackendError, OpenAIGenerator, approx_tokens

CONV = [{"role": "user", "content": "What is 2 + 3?"}]


def completion(request: httpx.Request, texts=None) -> httpx.Response:
    body = json.loads(request.content)
    n = body.get("n", 1)
    texts = texts or [f"{body['messages'][-1]['content']} -> answer {i}" for i in range(n)]
    return httpx.Response(
        200,
        json={
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                for i, t in reversed(list(enumerate(texts)))  # out of order on purpose
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7 * n, "total_tokens": 11 + 7 * n},
        },
    )


def make(handler, **kwargs) -> OpenAIGenerator:
    kwargs.setdefault("backoff_base", 0.001)
    return OpenAIGenerator("served-model", base_url="http://test/v1", transport=httpx.MockTransport(handler), **kwargs)


def test_success_payload_and_usage(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sekret")
    seen = []

    def handler(request):
        seen.append(request)
        return completion(request)

    gen = make(handler, api_key_env="MY_KEY")
    convs = [CONV, [{"role": "user", "content": "second"}]]
    out = gen.chat(convs, SamplingConfig(temperature=0.5, top_p=0.9, max_tokens=33, n=2, seed=4, stop=["</answer>"]))
    assert [g.text for g in out] == [
        "What is 2 + 3? -> answer 0",
        "What is 2 + 3? -> answer 1",
        "second -> answer 0",
        "second -> answer 1",
    ]
    assert all(g.prompt_tokens == 11 for g in out)
    assert out[0].completion_tokens + out[1].completion_tokens == 14
    assert out[0].finish_reason == "stop"
    body = json.loads(seen[0].content)
    assert seen[0].url == "http://test/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sekret"
    assert {k: body[k] for k in ("model", "n", "temperature", "top_p", "max_tokens", "seed", "stop")} == {
        "model": "served-model",
        "n": 2,
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 33,
        "seed": 4,
        "stop": ["</answer>"],
    }


def test_no_key_sends_no_auth_header(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    seen = []
    gen = make(lambda r: seen.append(r) or completion(r))
    assert gen.chat([CONV], SamplingConfig(n=1))[0].completion_tokens == 7
    assert "authorization" not in seen[0].headers


@pytest.mark.parametrize("status", [500, 429, 503])
def test_retries_then_succeeds(status):
    calls = []

    def handler(request):
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(status, json={"error": {"message": "busy"}})
        return completion(request)

    out = make(handler, max_retries=3).chat([CONV], SamplingConfig())
    assert len(calls) == 3 and out[0].text.endswith("answer 0")


def test_retries_exhausted_is_clear():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(502, text="bad gateway")

    with pytest.raises(BackendError, match=r"failed after 3 attempts; last error: HTTP 502: bad gateway"):
        make(handler, max_retries=2).chat([CONV], SamplingConfig())
    assert len(calls) == 3


def test_client_error_fails_fast_with_server_message():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400, json={"error": {"message": "max_tokens is too large"}})

    with pytest.raises(BackendError, match="HTTP 400: max_tokens is too large"):
        make(handler, max_retries=5).chat([CONV], SamplingConfig())
    assert len(calls) == 1


def test_timeouts_are_retried_and_reported():
    calls = []

    def flaky(request):
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ReadTimeout("slow", request=request)
        if len(calls) == 2:
            raise httpx.ConnectError("refused", request=request)
        return completion(request)

    assert make(flaky, max_retries=2).chat([CONV], SamplingConfig())[0].text

    def always_slow(request):
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(BackendError, match="timed out after 0.5s"):
        make(always_slow, max_retries=1, timeout=0.5).chat([CONV], SamplingConfig())


def test_concurrency_never_exceeds_bound():
    state = {"now": 0, "peak": 0, "calls": 0}

    async def handler(request):
        state["now"] += 1
        state["calls"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1
        return completion(request)

    convs = [[{"role": "user", "content": f"q{i}"}] for i in range(12)]
    out = make(handler, max_concurrency=3).chat(convs, SamplingConfig())
    assert [g.text for g in out] == [f"q{i} -> answer 0" for i in range(12)]
    assert state["calls"] == 12 and state["peak"] == 3


def test_chat_works_inside_running_loop():
    gen = make(completion)

    async def caller():
        return gen.chat([CONV], SamplingConfig())

    assert asyncio.run(caller())[0].text.endswith("answer 0")


def test_count_tokens_tokenize_then_fallback():
    def with_tokenize(request):
        assert request.url.path == "/tokenize"
        return httpx.Response(200, json={"count": 17, "max_model_len": 4096, "tokens": list(range(17))})

    gen = make(with_tokenize)
    assert gen.count_tokens(CONV) == 17 and gen.context_length == 4096

    calls = []

    def without(request):
        calls.append(1)
        return httpx.Response(404, json={"detail": "Not Found"})

    gen = make(without)
    assert gen.count_tokens(CONV) == approx_tokens(CONV) == gen.count_tokens(CONV)
    assert len(calls) == 1  # the missing endpoint is not asked again


def test_chat_template_kwargs_sent_only_when_set():
    """vLLM's server reads ``chat_template_kwargs`` in chat and /tokenize bodies; other servers never see the key."""
    bodies = {}

    def handler(request):
        bodies.setdefault(request.url.path, []).append(json.loads(request.content))
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 9})
        return completion(request)

    off = make(handler, chat_template_kwargs={"enable_thinking": False})
    off.chat([CONV], SamplingConfig())
    assert off.count_tokens(CONV) == 9
    assert bodies["/v1/chat/completions"][-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert bodies["/tokenize"][-1]["chat_template_kwargs"] == {"enable_thinking": False}
    make(handler).chat([CONV], SamplingConfig())
    make(handler).count_tokens(CONV)
    assert "chat_template_kwargs" not in bodies["/v1/chat/completions"][-1]
    assert "chat_template_kwargs" not in bodies["/tokenize"][-1]
    built = build_generator(BackendConfig(backend="openai", model="m", chat_template_kwargs={"enable_thinking": False}))
    assert built.chat_template_kwargs == {"enable_thinking": False}


def test_wrong_choice_count_and_config_checks():
    gen = make(lambda r: completion(r, texts=["only one"]))
    with pytest.raises(BackendError, match="expected n=2"):
        gen.chat([CONV], SamplingConfig(n=2))
    with pytest.raises(ValueError, match="base_url"):
        OpenAIGenerator("m", base_url="localhost:8000")
    built = build_generator(BackendConfig(backend="openai", model="m", max_concurrency=2))
    assert isinstance(built.generator, OpenAIGenerator) and built.max_concurrency == 2  # inside the prompt budget


def with_logprobs(request: httpx.Request) -> httpx.Response:
    """A vLLM-like server: one ``logprobs.content`` entry per generated token, usage = their total."""
    body = json.loads(request.content)
    n = body.get("n", 1)
    lengths = [2 + i for i in range(n)]
    choices = []
    for i, length in reversed(list(enumerate(lengths))):
        top = body.get("top_logprobs", 0)
        content = [
            {
                "token": f"t{k}",
                "logprob": -0.5 * (k + 1),
                "bytes": None,
                "top_logprobs": [{"token": f"t{k}", "logprob": -0.5 * (k + 1)}, {"token": "a", "logprob": -3.0}][:top],
            }
            for k in range(length)
        ]
        choices.append(
            {
                "index": i,
                "message": {"role": "assistant", "content": "x" * (10 - i)},  # by text length: 3 + 2
                "logprobs": {"content": content} if body.get("logprobs") else None,
                "finish_reason": "stop",
            }
        )
    return httpx.Response(
        200, json={"choices": choices, "usage": {"prompt_tokens": 5, "completion_tokens": sum(lengths)}}
    )


def test_logprobs_requested_and_parsed():
    seen = []
    gen = make(lambda r: seen.append(json.loads(r.content)) or with_logprobs(r))
    out = gen.chat([CONV], SamplingConfig(n=2, logprobs=True))
    assert seen[-1]["logprobs"] is True
    assert [g.token_logprobs for g in out] == [[-0.5, -1.0], [-0.5, -1.0, -1.5]]
    assert [g.completion_tokens for g in out] == [2, 3]  # usage split by log-prob counts, not text length
    assert out[1].perplexity() == pytest.approx(math.e)
    plain = gen.chat([CONV], SamplingConfig(n=2))
    assert "logprobs" not in seen[-1] and all(g.token_logprobs is None for g in plain)


def test_top_logprobs_requested_and_parsed():
    seen = []
    gen = make(lambda r: seen.append(json.loads(r.content)) or with_logprobs(r))
    out = gen.chat([CONV], SamplingConfig(n=2, top_logprobs=2))
    assert seen[-1]["logprobs"] is True and seen[-1]["top_logprobs"] == 2
    assert [g.tokens for g in out] == [["t0", "t1"], ["t0", "t1", "t2"]]
    assert out[1].top_logprobs[2] == {"t2": -1.5, "a": -3.0}
    assert out[0].token_logprobs is None and [g.completion_tokens for g in out] == [2, 3]
    with pytest.raises(BackendError, match="did not return log-probs"):
        make(completion).chat([CONV], SamplingConfig(top_logprobs=2))


def test_server_without_logprobs_is_a_clear_error():
    gen = make(completion)  # ignores `logprobs: true`
    with pytest.raises(
        BackendError, match=r"http://test/v1/chat/completions \(model 'served-model'\) did not return log-probs"
    ):
        gen.chat([CONV], SamplingConfig(logprobs=True))


def test_logprobs_alone_send_top_logprobs_zero_and_seeds_differ_per_conversation():
    """llama-cpp-python's server returns log-probs only when ``top_logprobs`` is present; a server seeds each request
    on its own, so two equal conversations in one call must not share a seed."""
    seen = []
    gen = make(lambda r: seen.append(json.loads(r.content)) or with_logprobs(r))
    gen.chat([CONV], SamplingConfig(logprobs=True))
    assert seen[-1]["logprobs"] is True and seen[-1]["top_logprobs"] == 0
    seen.clear()
    gen.chat([CONV, CONV, CONV], SamplingConfig(seed=7))
    assert sorted(body["seed"] for body in seen) == [7, 8, 9]


def test_extra_body_is_merged_into_every_chat_request():
    seen = []
    gen = make(lambda r: seen.append(json.loads(r.content)) or completion(r), extra_body={"top_k": 0, "min_p": 0.0})
    gen.chat([CONV, CONV], SamplingConfig())
    assert [(body["top_k"], body["min_p"]) for body in seen] == [(0, 0.0), (0, 0.0)]
    built = build_generator(BackendConfig(backend="openai", model="m", extra_body={"repeat_penalty": 1.0}))
    assert built.generator.extra_body == {"repeat_penalty": 1.0}
    with pytest.raises(ValueError, match="extra_body must be a mapping"):
        BackendConfig(backend="openai", model="m", extra_body=["top_k"])
