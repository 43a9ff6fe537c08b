"""vLLM backend: pure helpers always; the engine only where vllm and a CUDA GPU exist."""

import pytest

from metamod.llm import BackendConfig, SamplingConfig, build_generator, is_vllm_available
from metamod.llm.vllm_backend import INSTALL_HINT, sampling_kwargs


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


requires_vllm = pytest.mark.skipif(not (is_vllm_available() and _has_cuda()), reason="needs vllm and a CUDA GPU")


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=5, n=3, seed=1, stop=["x"]))
    assert kw == {"n": 3, "temperature": 0.7, "top_p": 0.9, "max_tokens": 5, "seed": 1, "stop": ["x"]}
    assert sampling_kwargs(SamplingConfig(temperature=0))["top_p"] == 1.0


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
