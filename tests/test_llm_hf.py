"""HFGenerator on the tiny model: batching, left padding, n samples, stop strings, token counts, adapters."""

import dataclasses
import re

import pytest

from metamod.llm import BackendConfig, SamplingConfig, build_generator
from metamod.llm.hf import HFGenerator

CONVS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [
        {"role": "system", "content": "You are careful."},
        {
            "role": "user",
            "content": "Ava has 12 apples and gets 7 more. How many apples does Ava have now? Reason step by step.",
        },
    ],
    [{"role": "user", "content": "Agent 1: 5"}],
]


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    return tiny_model_dir  # the session's tiny model (tests/conftest.py)


@pytest.fixture(scope="module")
def gen(tiny_dir):
    return HFGenerator(str(tiny_dir), device="cpu", batch_size=2)


def test_batched_greedy_matches_one_at_a_time(gen):
    greedy = SamplingConfig(temperature=0, max_tokens=12)
    batched = gen.chat(CONVS, greedy)
    single = [gen.chat([c], greedy)[0] for c in CONVS]
    assert [g.text for g in batched] == [g.text for g in single]
    for g, conv in zip(batched, CONVS, strict=True):
        assert g.prompt_tokens == gen.count_tokens(conv) > 0
        assert 1 <= g.completion_tokens <= 12
        assert g.finish_reason in ("stop", "length")
    assert gen.context_length == 2048
    assert gen.chat([], greedy) == []


def test_n_samples_conversation_major_and_seeded(gen):
    sampling = SamplingConfig(temperature=1.0, max_tokens=8, n=3, seed=123)
    out = gen.chat(CONVS[:2], sampling)
    assert len(out) == 6
    assert [g.prompt_tokens for g in out] == [gen.count_tokens(CONVS[0])] * 3 + [gen.count_tokens(CONVS[1])] * 3
    again = gen.chat(CONVS[:2], sampling)
    assert [g.text for g in out] == [g.text for g in again]
    assert len({g.text for g in out}) > 1  # a random model at temperature 1 does not repeat itself
    greedy = gen.chat(CONVS[:2], SamplingConfig(temperature=0, max_tokens=6, n=2))
    assert len(greedy) == 4 and greedy[0] == greedy[1] and greedy[2] == greedy[3]


def test_stop_strings_cut_text(gen):
    base = gen.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=20))[0]
    words = re.findall(r"[A-Za-z]{2,}", base.text)
    assert words, base.text
    stop = words[-1]
    cut = gen.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=20, stop=[stop]))[0]
    assert cut.text == base.text[: base.text.find(stop)]
    assert cut.finish_reason == "stop"
    assert 1 <= cut.completion_tokens <= base.completion_tokens


def test_errors_are_clear(tmp_path, tiny_dir):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        HFGenerator(str(tmp_path / "missing"), device="cpu")
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        HFGenerator(str(tiny_dir), adapter=str(tmp_path), device="cpu")
    with pytest.raises(ValueError, match="dtype"):
        HFGenerator(str(tiny_dir), dtype="int3", device="cpu")


def test_lora_adapter_loads_and_changes_outputs(tmp_path, tiny_dir, gen):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    lora = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_" in name:
                p.normal_(0, 1.0)
    lora.save_pretrained(tmp_path / "adapter")

    cfg = BackendConfig(backend="hf", model=str(tiny_dir), adapter=str(tmp_path / "adapter"), device="cpu")
    adapted = build_generator(cfg)
    assert type(adapted.model).__name__.startswith("Peft")
    assert "adapter" in adapted.name
    greedy = SamplingConfig(temperature=0, max_tokens=10)
    out = adapted.chat(CONVS, greedy)
    assert len(out) == 3
    assert [g.text for g in out] != [g.text for g in gen.chat(CONVS, greedy)]


def test_from_model_reuses_loaded_objects(gen):
    again = HFGenerator.from_model(gen.model, gen.tokenizer, name="policy")
    assert again.model is gen.model and again.name == "policy"
    assert (
        again.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=4))[0].text
        == gen.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=4))[0].text
    )


def test_pruned_decoding_matches_generate_greedy(tiny_dir):
    """The fast loop (finished rows leave the batch, growing KV buffers) computes what model.generate computes."""
    greedy = SamplingConfig(temperature=0, max_tokens=14)
    pruned = HFGenerator(str(tiny_dir), device="cpu", batch_size=3, decode="pruned")
    reference = HFGenerator(str(tiny_dir), device="cpu", batch_size=3, decode="generate")
    a, b = pruned.chat(CONVS, greedy), reference.chat(CONVS, greedy)
    assert [(g.text, g.completion_tokens, g.finish_reason) for g in a] == [
        (g.text, g.completion_tokens, g.finish_reason) for g in b
    ]
    stop = SamplingConfig(temperature=0, max_tokens=14, stop=[b[1].text[3:6]] if len(b[1].text) > 6 else None)
    assert [g.text for g in pruned.chat(CONVS, stop)] == [g.text for g in reference.chat(CONVS, stop)]


def test_pruned_sampling_is_seeded_and_top_p_narrows(tiny_dir):
    gen = HFGenerator(str(tiny_dir), device="cpu", batch_size=2, decode="pruned")
    sampling = SamplingConfig(temperature=1.0, max_tokens=8, n=2, seed=7)
    first, again = gen.chat(CONVS, sampling), gen.chat(CONVS, sampling)
    assert [g.text for g in first] == [g.text for g in again]
    assert len({g.text for g in first}) > 1
    nucleus = gen.chat(CONVS, SamplingConfig(temperature=1.0, top_p=1e-6, max_tokens=8, seed=7))
    greedy = gen.chat(CONVS, SamplingConfig(temperature=0, max_tokens=8))
    assert [g.text for g in nucleus] == [g.text for g in greedy]  # top_p -> 0 keeps only the argmax


def test_growing_cache_equals_dynamic_cache(tiny_dir):
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from metamod.llm.hf_decode import growing_cache

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir)).eval()
    ids = torch.randint(5, 200, (3, 9), generator=torch.Generator().manual_seed(0))
    logits = []
    for cache in (DynamicCache(), growing_cache(model)):
        with torch.inference_mode():
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            steps = [out.logits[:, -1]]
            token = out.logits[:, -1].argmax(-1)
            for i in range(70):  # past the first capacity, so the buffers grow
                if i == 30:
                    cache.batch_select_indices(torch.tensor([0, 2]))
                    token = token[[0, 2]]
                out = model(input_ids=token[:, None], past_key_values=cache, use_cache=True)
                steps.append(out.logits[:, -1])
                token = out.logits[:, -1].argmax(-1)
        logits.append(steps)
    assert type(growing_cache(model)).__name__ == "GrowingCache"
    for x, y in zip(*logits, strict=True):
        torch.testing.assert_close(x, y)


def test_shared_prefix_prefill_matches_generate(tiny_dir):
    system = {"role": "system", "content": "You are a careful assistant. " * 6}
    convs = [[system, *c[-1:]] for c in CONVS]
    greedy = SamplingConfig(temperature=0, max_tokens=10)
    pruned = HFGenerator(str(tiny_dir), device="cpu", batch_size=3, decode="pruned")
    reference = HFGenerator(str(tiny_dir), device="cpu", batch_size=3, decode="generate")
    from metamod.llm.hf_decode import shared_prefix_length

    assert shared_prefix_length([pruned._prompt_ids(c) for c in convs]) >= 16
    assert [g.text for g in pruned.chat(convs, greedy)] == [g.text for g in reference.chat(convs, greedy)]


def test_cpu_attention_equals_transformers_sdpa_with_padding(tiny_dir):
    """The KV-copy-free grouped-query attention gives transformers' sdpa logits on padded batches."""
    import torch
    from transformers import AutoModelForCausalLM

    from metamod.llm.cpu_attention import ATTENTION_NAME, use_gqa_attention

    stock = AutoModelForCausalLM.from_pretrained(str(tiny_dir)).eval()
    fast = AutoModelForCausalLM.from_pretrained(str(tiny_dir)).eval()
    assert stock.config._attn_implementation == "sdpa" and stock.config.num_key_value_heads < 4  # tiny model: GQA
    assert use_gqa_attention(fast) and fast.config._attn_implementation == ATTENTION_NAME
    ids = torch.randint(5, 200, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :5], mask[2, :2] = 0, 0  # left padding: the masked path, where transformers copies the KV heads
    with torch.inference_mode():
        a = stock(input_ids=ids, attention_mask=mask).logits
        b = fast(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()])
    assert HFGenerator(str(tiny_dir), device="cpu").model.config._attn_implementation == ATTENTION_NAME


# ---------------------------------------------------------------------------------------------- token log-probs


def _reference_greedy(model, prompt_ids, steps):
    """Greedy decoding by full forward passes (no cache, no padding): the tokens and their raw log-probs."""
    import torch

    ids, logprobs = list(prompt_ids), []
    with torch.inference_mode():
        for _ in range(steps):
            last = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            token = int(last.argmax())
            ids.append(token)
            logprobs.append(float(last[token]))
    return ids[len(prompt_ids) :], logprobs


def _teacher_forced(model, prompt_ids, completion_ids):
    """Raw-model log-probs of ``completion_ids`` after ``prompt_ids`` from one forward pass."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    positions = torch.arange(len(prompt_ids) - 1, ids.shape[1] - 1)
    return logprobs[positions, torch.tensor(completion_ids)].tolist()


@pytest.mark.parametrize("decode", ["pruned", "generate"])
def test_greedy_token_logprobs_match_a_full_forward(tiny_dir, decode):
    """Left-padded batch (prompts of different lengths), n=2: each token's log-prob is the model's own."""
    gen = HFGenerator(str(tiny_dir), device="cpu", batch_size=3, decode=decode)
    out = gen.chat(CONVS, SamplingConfig(temperature=0, max_tokens=8, n=2, logprobs=True))
    assert len({len(gen._prompt_ids(c)) for c in CONVS}) == 3 and len(out) == 6
    for k, conv in enumerate(CONVS):
        tokens, expected = _reference_greedy(gen.model, gen._prompt_ids(conv), 8)
        for g in out[2 * k : 2 * k + 2]:
            assert len(g.token_logprobs) == g.completion_tokens
            assert all(v <= 0 for v in g.token_logprobs)
            assert g.token_logprobs == pytest.approx(expected[: g.completion_tokens], abs=1e-4)
            assert g.perplexity() >= 1
        assert out[2 * k].token_logprobs is not out[2 * k + 1].token_logprobs  # repeated greedy rows: copies


def test_sampled_token_logprobs_are_raw_model_logprobs(tiny_dir):
    """At temperature 0.5 / top-p 0.9 the log-probs are still the model's own distribution (not the warped one)."""
    from metamod.llm.hf_decode import decode_rows

    gen = HFGenerator(str(tiny_dir), device="cpu")
    prompts = [gen._prompt_ids(CONVS[0]), gen._prompt_ids(CONVS[1])]
    rows = [prompts[0], prompts[0], prompts[1]]
    logprobs: list[list[float]] = []
    ids = decode_rows(
        gen.model, rows, pad_id=gen.tokenizer.pad_token_id, eos_ids=gen._eos_ids(), max_new_tokens=8,
        temperature=0.5, top_p=0.9, seed=3, logprobs_out=logprobs,
    )  # fmt: skip
    assert [len(x) for x in logprobs] == [len(x) for x in ids]
    for prompt, row_ids, row_logprobs in zip(rows, ids, logprobs, strict=True):
        assert row_logprobs == pytest.approx(_teacher_forced(gen.model, prompt, row_ids), abs=1e-4)
    sampling = SamplingConfig(temperature=0.5, top_p=0.9, max_tokens=8, n=3, seed=5, logprobs=True)
    out = gen.chat(CONVS, sampling)
    assert all(len(g.token_logprobs) == g.completion_tokens and max(g.token_logprobs) <= 0 for g in out)
    assert [g.text for g in out] == [g.text for g in gen.chat(CONVS, dataclasses.replace(sampling, logprobs=False))]


def test_logprobs_off_leaves_none_and_stop_strings_keep_the_invariant(gen):
    plain = gen.chat(CONVS, SamplingConfig(temperature=0, max_tokens=10))
    assert all(g.token_logprobs is None and g.perplexity() is None for g in plain)
    base = gen.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=20, logprobs=True))[0]
    stop = re.findall(r"[A-Za-z]{2,}", base.text)[-1]
    cut = gen.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=20, stop=[stop], logprobs=True))[0]
    assert 1 <= cut.completion_tokens <= base.completion_tokens
    assert cut.token_logprobs == base.token_logprobs[: cut.completion_tokens]  # through the stop-completing token


@pytest.mark.parametrize("decode", ["pruned", "generate"])
def test_top_logprobs_are_the_models_top_k_and_change_nothing_generated(tiny_dir, decode):
    """top_logprobs=k: per completion token its text and the raw top-k (a full forward's), texts unchanged."""
    import torch

    gen = HFGenerator(str(tiny_dir), device="cpu", batch_size=2, decode=decode)
    for sampling in (
        SamplingConfig(temperature=0, max_tokens=6, n=2),
        SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=6, n=2, seed=4),
    ):
        plain = gen.chat(CONVS, sampling)
        top = gen.chat(CONVS, dataclasses.replace(sampling, top_logprobs=4))
        assert [g.text for g in top] == [g.text for g in plain]
        assert all(g.tokens is None and g.top_logprobs is None for g in plain)
        for k, conv in enumerate(CONVS):
            prompt = gen._prompt_ids(conv)
            for g in top[2 * k : 2 * k + 2]:
                assert len(g.tokens) == len(g.top_logprobs) == g.completion_tokens
                ids = gen.tokenizer(g.text, add_special_tokens=False)["input_ids"][: g.completion_tokens]
                assert "".join(g.tokens).startswith(gen.tokenizer.decode(ids[:1]))
                with torch.inference_mode():  # the first position's top 4 from one forward pass
                    first = torch.log_softmax(gen.model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
                values, best = torch.topk(first, 4)
                expected = {}
                for token_id, value in zip(best.tolist(), values.tolist(), strict=True):
                    text = gen.tokenizer.decode([token_id], skip_special_tokens=True)
                    expected[text] = float(torch.logaddexp(torch.tensor(expected.get(text, -1e9)), torch.tensor(value)))
                assert g.top_logprobs[0] == pytest.approx(expected, abs=1e-4)
                assert all(len(step) <= 4 and max(step.values()) <= 0 for step in g.top_logprobs)
    with pytest.raises(ValueError, match="top_logprobs"):
        SamplingConfig(top_logprobs=21)


def test_chat_template_kwargs_reach_the_template(gen, tiny_dir):
    """A Qwen3-style template variable (enable_thinking) is read in prompts and token counts alike."""
    import copy

    from metamod.llm.tiny import CHAT_TEMPLATE

    tokenizer = copy.deepcopy(gen.tokenizer)  # the module's generator keeps its own template
    tokenizer.chat_template = CHAT_TEMPLATE + (
        "{% if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
        "{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    )
    plain = HFGenerator.from_model(gen.model, tokenizer)
    off = HFGenerator.from_model(gen.model, tokenizer, chat_template_kwargs={"enable_thinking": False})
    assert "<think>" not in tokenizer.decode(plain._prompt_ids(CONVS[0]))
    assert tokenizer.decode(off._prompt_ids(CONVS[0])).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert off.count_tokens(CONVS[0]) > plain.count_tokens(CONVS[0])
    out = off.chat(CONVS[:1], SamplingConfig(temperature=0, max_tokens=3))[0]
    assert out.prompt_tokens == off.count_tokens(CONVS[0])
    built = build_generator(
        BackendConfig(backend="hf", model=str(tiny_dir), device="cpu", chat_template_kwargs={"enable_thinking": False})
    )
    assert built.chat_template_kwargs == {"enable_thinking": False}
    with pytest.raises(ValueError, match=r"chat_template_kwargs must not set \['add_generation_prompt'\]"):
        BackendConfig(model="m", chat_template_kwargs={"add_generation_prompt": False})
