"""vLLM backend: pure helpers always, ``chat`` over a fake engine; the engine only where vllm and a CUDA GPU exist."""

import sys
import types
from dataclasses import dataclass, field

import pytest

from metamod.llm import BackendConfig, SamplingConfig, build_generator, is_vllm_available
from metamod.llm.vllm_backend import INSTALL_HINT, VLLMGenerator, sampling_kwargs


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


requires_vllm = pytest.mark.skipif(not (is_vllm_available() and _has_cuda()), reason="needs vllm and a CUDA GPU")


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=5, n=3, seed=1, stop=["x"]))
    assert kw == {"n": 3, "temperature": 0.7, "top_p": 0.9, "max_tokens": 5, "seed": 1, "stop": ["x"]}
    assert sampling_kwargs(SamplingConfig(temperature=0))["top_p"] == 1.0
    assert sampling_kwargs(SamplingConfig(logprobs=True))["logprobs"] == 0  # the sampled token's log-prob only
    assert sampling_kwargs(SamplingConfig(logprobs=True, top_logprobs=3))["logprobs"] == 3


# The shapes of vllm 0.31.0's outputs (vllm/outputs.py, vllm/logprobs.py), without vllm.
@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FakeCompletion:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str = "stop"


@dataclass
class FakeRequest:
    prompt_token_ids: list[int]
    outputs: list[FakeCompletion] = field(default_factory=list)


class FakeLLM:
    """``LLM.chat``: two samples per conversation, listed out of order; log-probs only when asked for."""

    def __init__(self, *, drop_logprobs: bool = False):
        self.calls, self.drop_logprobs, self.chat_kwargs = [], drop_logprobs, []

    def chat(self, conversations, *, sampling_params, **kwargs):
        self.calls.append(sampling_params)
        self.chat_kwargs.append(kwargs)
        want = sampling_params.kwargs.get("logprobs") is not None and not self.drop_logprobs
        requests = []
        for c, _conv in enumerate(conversations):
            outputs = []
            for i in reversed(range(sampling_params.kwargs["n"])):
                ids = [10 + c, 20 + i, 2][: 2 + i]
                # the sampled token first, then (logprobs >= 1) the top tokens; the sampled one is the key to read
                positions = [
                    {t: FakeLogprob(-0.1 * (k + 1) - c, 2, f"t{t}"), 99: FakeLogprob(-0.01, 1, "top")}
                    for k, t in enumerate(ids)
                ]
                outputs.append(FakeCompletion(i, f"c{c} s{i}", ids, positions if want else None))
            requests.append(FakeRequest(prompt_token_ids=[1] * (3 + c), outputs=outputs))
        return requests


class FakeTokenizer:
    """``apply_chat_template`` that records its keyword arguments and renders one marker per template kwarg."""

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, conversation, **kwargs):
        self.calls.append(kwargs)
        extra = "".join(f" {k}={v}" for k, v in kwargs.items() if k not in ("tokenize", "add_generation_prompt"))
        return " ".join(m["content"] for m in conversation) + extra

    def encode(self, text, add_special_tokens=True):
        return text.split()


def _fake_generator(monkeypatch, llm: FakeLLM, chat_template_kwargs=None) -> VLLMGenerator:
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(kwargs=kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    gen = VLLMGenerator.__new__(VLLMGenerator)  # no engine: only chat() is exercised
    gen.llm, gen.name, gen.context_length, gen._lora_request, gen._model_defaults = llm, "fake-vllm", 64, None, {}
    gen.tokenizer, gen.chat_template_kwargs = FakeTokenizer(), dict(chat_template_kwargs or {})
    return gen


def test_chat_template_kwargs_go_to_llm_chat_and_count_tokens(monkeypatch):
    """vllm 0.31.0 ``LLM.chat(..., chat_template_kwargs=...)``; count_tokens renders the same template."""
    conv = [{"role": "user", "content": "a b"}]
    off = _fake_generator(monkeypatch, FakeLLM(), chat_template_kwargs={"enable_thinking": False})
    off.chat([conv], SamplingConfig(max_tokens=4))
    assert off.llm.chat_kwargs[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert off.llm.chat_kwargs[-1]["add_generation_prompt"] is True
    assert off.count_tokens(conv) == 3 and off.tokenizer.calls[-1]["enable_thinking"] is False
    plain = _fake_generator(monkeypatch, FakeLLM())
    plain.chat([conv], SamplingConfig(max_tokens=4))
    assert plain.llm.chat_kwargs[-1]["chat_template_kwargs"] is None  # vLLM's own default
    assert plain.count_tokens(conv) == 2 and "enable_thinking" not in plain.tokenizer.calls[-1]


def test_chat_reads_token_logprobs_from_fake_outputs(monkeypatch):
    llm = FakeLLM()
    gen = _fake_generator(monkeypatch, llm)
    convs = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    out = gen.chat(convs, SamplingConfig(temperature=1.0, max_tokens=4, n=2, logprobs=True))
    assert llm.calls[-1].kwargs["logprobs"] == 0
    assert [g.text for g in out] == ["c0 s0", "c0 s1", "c1 s0", "c1 s1"]
    assert [g.completion_tokens for g in out] == [2, 3, 2, 3]
    assert [g.token_logprobs for g in out] == [
        pytest.approx([-0.1, -0.2]),
        pytest.approx([-0.1, -0.2, -0.3]),
        pytest.approx([-1.1, -1.2]),
        pytest.approx([-1.1, -1.2, -1.3]),
    ]
    assert all(len(g.token_logprobs) == g.completion_tokens for g in out)
    plain = gen.chat(convs, SamplingConfig(temperature=1.0, max_tokens=4, n=2))
    assert "logprobs" not in llm.calls[-1].kwargs and all(g.token_logprobs is None for g in plain)


def test_chat_reads_top_logprobs_from_fake_outputs(monkeypatch):
    """SamplingParams(logprobs=k); alternatives of rank <= k become top_logprobs, decoded_token the token texts."""
    llm = FakeLLM()
    gen = _fake_generator(monkeypatch, llm)
    convs = [[{"role": "user", "content": "a"}]]
    one = gen.chat(convs, SamplingConfig(temperature=1.0, max_tokens=4, n=2, top_logprobs=1))
    assert llm.calls[-1].kwargs["logprobs"] == 1
    assert [g.tokens for g in one] == [["t10", "t20"], ["t10", "t21", "t2"]]
    assert one[0].top_logprobs == [{"top": -0.01}, {"top": -0.01}] and one[0].token_logprobs is None
    two = gen.chat(convs, SamplingConfig(temperature=1.0, max_tokens=4, n=2, top_logprobs=2, logprobs=True))
    assert two[1].top_logprobs[2] == pytest.approx({"top": -0.01, "t2": -0.3})
    assert two[1].token_logprobs == pytest.approx([-0.1, -0.2, -0.3])
    with pytest.raises(RuntimeError, match="vLLM returned none of log-probs"):
        _fake_generator(monkeypatch, FakeLLM(drop_logprobs=True)).chat(convs, SamplingConfig(n=1, top_logprobs=3))


def test_missing_vllm_logprobs_is_an_error(monkeypatch):
    gen = _fake_generator(monkeypatch, FakeLLM(drop_logprobs=True))
    with pytest.raises(RuntimeError, match="fake-vllm: vLLM returned none of log-probs for 2 completion tokens"):
        gen.chat([[{"role": "user", "content": "a"}]], SamplingConfig(n=1, logprobs=True))


@pytest.mark.skipif(is_vllm_available(), reason="vllm is installed")
def test_missing_vllm_raises_install_hint():
    with pytest.raises(ImportError, match="pip install"):
        build_generator(BackendConfig(backend="vllm", model="x"))
    assert "vllm==0.31.0" in INSTALL_HINT


def test_lora_rank_must_be_a_vllm_choice():
    with pytest.raises(ValueError, match="max_lora_rank"):
        BackendConfig(backend="vllm", model="x", max_lora_rank=12)


@pytest.mark.vllm
@requires_vllm
def test_vllm_matches_protocol(tmp_path):
    from metamod.llm.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", hidden_size=64, num_heads=2, num_kv_heads=1)
    gen = build_generator(BackendConfig(backend="vllm", model=str(model), gpu_memory_utilization=0.3, dtype="bfloat16"))
    convs = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Agent 1: 5"}]]
    out = gen.chat(convs, SamplingConfig(temperature=1.0, max_tokens=8, n=2, seed=0))
    assert len(out) == 4
    assert out[0].prompt_tokens == gen.count_tokens(convs[0]) == out[1].prompt_tokens
    assert all(1 <= g.completion_tokens <= 8 for g in out)
    greedy = gen.chat(convs, SamplingConfig(temperature=0, max_tokens=8))
    assert [g.text for g in greedy] == [g.text for g in gen.chat(convs, SamplingConfig(temperature=0, max_tokens=8))]
    gen.chat_template_kwargs = {"enable_thinking": False}  # the real LLM.chat takes it (the tiny template ignores it)
    assert [g.text for g in gen.chat(convs, SamplingConfig(temperature=0, max_tokens=8))] == [g.text for g in greedy]
    assert gen.count_tokens(convs[0]) == out[0].prompt_tokens


def test_hf_overrides_reach_the_engine(monkeypatch):
    """BackendConfig.hf_overrides (e.g. Qwen3's YaRN rope for a 72k context) is passed to vllm.LLM as it is."""
    seen = {}

    class RecordingLLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)
            self.model_config = types.SimpleNamespace(max_model_len=kwargs.get("max_model_len"))

        def get_tokenizer(self):
            return FakeTokenizer()

    module = types.ModuleType("vllm")
    module.LLM = RecordingLLM
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr("metamod.llm.vllm_backend.is_vllm_available", lambda: True, raising=False)
    monkeypatch.setattr("metamod.llm.is_vllm_available", lambda: True, raising=False)
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    overrides = {"max_position_embeddings": 131072, "rope_parameters": rope}
    try:
        build_generator(BackendConfig(backend="vllm", model="m", max_model_len=72000, hf_overrides=overrides))
    except Exception as err:  # the fake engine lacks what later setup reads; the constructor call is what matters
        assert seen, f"vllm.LLM was not called: {err}"
    assert seen["hf_overrides"] == overrides and seen["max_model_len"] == 72000
