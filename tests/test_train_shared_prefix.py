"""Shared prompt prefixes (metamod/train/shared_prefix.py) compute what TRL computes: log-probs, entropies,
gradients and sampled tokens, checked against ``trl.GRPOTrainer``'s own methods on the tiny model."""

import pytest
import torch
from datasets import Dataset

from tests._train_data import moderator_rows

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tmp_path_factory):
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from metamod.rewards import get_reward_funcs
    from metamod.train.shared_prefix import SharedPrefixMixin

    class Trainer(SharedPrefixMixin, GRPOTrainer):
        pass

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("shared_prefix")), per_device_train_batch_size=8, num_generations=4,
        max_completion_length=6, temperature=0.9, beta=0.0, report_to="none", save_strategy="no", use_cpu=True,
        seed=0,
    )  # fmt: skip
    funcs, _ = get_reward_funcs(["format", "control"])
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = Trainer(
        model=str(tiny_model_dir), reward_funcs=funcs, args=args, train_dataset=Dataset.from_list(moderator_rows(8, 0)),
        processing_class=tokenizer, peft_config=lora,
    )  # fmt: skip
    for name, param in trainer.model.named_parameters():  # LoRA B starts at 0: make the adapter matter
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05, generator=torch.Generator().manual_seed(1))
    return trainer


def _batch(trainer, prompts=2, group=4, completion=5):
    """Left-padded prompts of different lengths, each repeated ``group`` times, + right-padded completions."""
    tok = trainer.processing_class
    texts = [f"Agent 1 says {'the answer is ' * (3 * i + 1)}{i}" for i in range(prompts)]
    rows = [tok(t)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((prompts, width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    gen = torch.Generator().manual_seed(0)
    comp = torch.randint(3, tok.vocab_size, (ids.size(0), completion), generator=gen)
    comp_mask = torch.ones_like(comp)
    comp_mask[1, 2:] = 0  # an early EOS
    comp_mask[-1, 4:] = 0
    order = torch.randperm(ids.size(0), generator=gen)  # TRL shuffles the generation batch
    return torch.cat([ids, comp], 1)[order], torch.cat([mask, comp_mask], 1)[order], completion


def _logps_and_grads(trainer, shared: bool, batch_size=None):
    from trl import GRPOTrainer

    ids, mask, keep = _batch(trainer)
    trainer.model.zero_grad()
    method = (
        trainer._get_per_token_logps_and_entropies
        if shared
        else super(type(trainer), trainer)._get_per_token_logps_and_entropies
    )
    assert shared or isinstance(trainer, GRPOTrainer)
    logps, entropy, _ = method(trainer.model, ids, mask, keep, batch_size=batch_size, compute_entropy=True)
    comp_mask = mask[:, -keep:]
    (logps * comp_mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return logps.detach() * comp_mask, entropy.detach() * comp_mask, grads


@pytest.mark.parametrize("batch_size", [None, 3])
def test_logps_entropy_and_gradients_equal_trls(trainer, batch_size):
    ref_logps, ref_entropy, ref_grads = _logps_and_grads(trainer, shared=False, batch_size=batch_size)
    logps, entropy, grads = _logps_and_grads(trainer, shared=True, batch_size=batch_size)
    assert ref_logps.abs().sum() > 0 and len(ref_grads) > 0
    torch.testing.assert_close(logps, ref_logps, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(entropy, ref_entropy, rtol=1e-4, atol=1e-4)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-3, atol=1e-5, msg=name)


def test_shared_path_runs_each_prompt_once(trainer, monkeypatch):
    """The prompt tokens go through the model once per distinct prompt (2), not once per row (8)."""
    seen = []
    model = trainer.model.get_base_model()
    handle = model.model.embed_tokens.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    try:
        _logps_and_grads(trainer, shared=True)
    finally:
        handle.remove()
    ids, _, keep = _batch(trainer)
    assert seen == [(2, ids.size(1) - keep - 1), (8, keep + 1)]


def test_off_switch_and_gradient_checkpointing_use_trls_path(trainer, monkeypatch):
    calls = []
    monkeypatch.setattr(trainer, "_shared_prefix_logps", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(trainer, "share_prompt_prefix", False)
    _logps_and_grads(trainer, shared=True)
    monkeypatch.setattr(trainer, "share_prompt_prefix", True)
    monkeypatch.setattr(trainer.model, "is_gradient_checkpointing", True, raising=False)
    _logps_and_grads(trainer, shared=True)
    assert calls == []


@pytest.mark.parametrize("temperature", [None, 0.9])  # greedy and seeded sampling
def test_generation_is_token_identical(trainer, monkeypatch, temperature):
    from trl import GRPOTrainer

    if temperature is None:
        monkeypatch.setattr(trainer.generation_config, "do_sample", False)
    tok = trainer.processing_class
    prompts = [tok(f"Question {i}: {'what is it ' * (i + 1)}?")["input_ids"] for i in range(2)]
    prompt_ids = [p for p in prompts for _ in range(4)]
    calls = []
    real_prefill = __import__("metamod.train.shared_prefix", fromlist=["prefill"]).prefill
    monkeypatch.setattr(
        "metamod.train.shared_prefix.prefill", lambda *a, **k: calls.append(a[1].shape) or real_prefill(*a, **k)
    )
    torch.manual_seed(0)
    shared, _ = trainer._generate_single_turn(prompt_ids, None, {}, 4)
    torch.manual_seed(0)
    plain, _ = GRPOTrainer._generate_single_turn(trainer, prompt_ids, None, {}, 4)
    assert calls and calls[0][0] == 2  # two distinct prompts prefilled once
    assert shared == plain
    assert "generate" not in trainer.model.__dict__  # the per-call wrapper is gone
