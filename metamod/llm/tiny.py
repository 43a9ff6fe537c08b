"""A tiny causal language model built fully offline, so every stage runs on a CPU without a model hub.

The model is randomly initialised (it knows nothing); it exists so that generation, GRPO + LoRA training,
evaluation and export can all be exercised end to end. Its byte-level BPE tokenizer is trained on text metamod
itself produces (every prompt template, synthetic arithmetic problems and solutions, the moderator protocol
words), so prompts tokenize into a sensible number of tokens. Everything is deterministic given the seed.

>>> cfg = TinyModelConfig(tiny_hidden_size=32)
>>> cfg.to_kwargs()["hidden_size"]
32
>>> "<answer>" in "".join(tiny_corpus(seed=0)[:200])
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from metamod.files import atomic_write_json, staged_folder

logger = logging.getLogger(__name__)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
BUILD_ARGS_FILE = "metamod_tiny.json"
ARCHS = ("qwen3", "llama")

# ChatML, the format Qwen models use; the generation prompt opens an assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass
class TinyModelConfig:
    """Knobs of the offline tiny model (embed in a command's config; fields are prefixed to avoid clashes)."""

    tiny_seed: int = field(default=0, metadata={"help": "Seed for the tiny model's corpus and weight initialisation."})
    tiny_arch: str = field(default="qwen3", metadata={"help": f"Tiny model architecture: one of {', '.join(ARCHS)}."})
    tiny_vocab_size: int = field(default=512, metadata={"help": "Byte-level BPE vocabulary size (>= 300)."})
    tiny_hidden_size: int = field(default=64, metadata={"help": "Hidden size of the tiny model."})
    tiny_num_layers: int = field(default=2, metadata={"help": "Number of transformer layers."})
    tiny_num_heads: int = field(default=4, metadata={"help": "Number of attention heads (must divide hidden size)."})
    tiny_num_kv_heads: int = field(default=2, metadata={"help": "Number of key/value heads (must divide heads)."})
    tiny_intermediate_size: int = field(default=128, metadata={"help": "MLP intermediate size."})
    tiny_max_position_embeddings: int = field(default=2048, metadata={"help": "Maximum context length in tokens."})
    tiny_initializer_range: float = field(
        default=0.2,
        metadata={
            "help": "Std of the random weight init. Keep it large (0.2): with the usual 0.02 the logits are "
            "nearly flat and GRPO on the tiny model cannot move them far enough to learn."
        },
    )

    def __post_init__(self) -> None:
        _check_args(self.to_kwargs())

    def to_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`build_tiny_model` / :func:`ensure_tiny_model` (prefix removed)."""
        return {k.removeprefix("tiny_"): v for k, v in asdict(self).items()}


def _check_args(args: dict[str, Any]) -> None:
    if args["arch"] not in ARCHS:
        raise ValueError(f"tiny arch must be one of {list(ARCHS)}, got {args['arch']!r}")
    if args["vocab_size"] < 300:
        raise ValueError(f"tiny vocab_size must be >= 300 (256 bytes + specials + merges), got {args['vocab_size']}")
    for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
        if args[key] < 1:
            raise ValueError(f"tiny {key} must be >= 1, got {args[key]}")
    if args["hidden_size"] % args["num_heads"]:
        raise ValueError(
            f"tiny hidden_size ({args['hidden_size']}) must be divisible by num_heads ({args['num_heads']}); "
            "change one of them"
        )
    if args["num_heads"] % args["num_kv_heads"]:
        raise ValueError(
            f"tiny num_heads ({args['num_heads']}) must be divisible by num_kv_heads ({args['num_kv_heads']})"
        )
    if args["max_position_embeddings"] < 64:
        raise ValueError(f"tiny max_position_embeddings must be >= 64, got {args['max_position_embeddings']}")
    if args["initializer_range"] <= 0:
        raise ValueError(f"tiny initializer_range must be > 0, got {args['initializer_range']}")


# ---------------------------------------------------------------- corpus

_NAMES = ["Ava", "Ben", "Cleo", "Dev", "Emma", "Finn", "Gia", "Hugo", "Ines", "Jon"]
_ITEMS = ["apples", "books", "coins", "stickers", "marbles", "pencils", "cookies", "tickets", "shells", "cards"]


def _arith_problem(rng: random.Random) -> tuple[str, list[str], str]:
    """One synthetic word problem, its step strings and its answer."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
    kind = rng.randrange(4)
    if kind == 0:
        question = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
        steps, answer = [f"{a} + {b} = {a + b}"], a + b
    elif kind == 1:
        big = a + b
        question = f"{name} had {big} {item} and gave away {b}. How many {item} are left?"
        steps, answer = [f"{big} - {b} = {a}"], a
    elif kind == 2:
        question = f"{name} buys {c} boxes with {a} {item} in each box, then loses {b}. How many {item} remain?"
        steps, answer = [f"{c} * {a} = {c * a}", f"{c * a} - {b} = {c * a - b}"], c * a - b
    else:
        total = a * c
        question = f"{name} shares {total} {item} equally among {c} friends. How many {item} does each friend get?"
        steps, answer = [f"{total} / {c} = {a}"], a
    return question, steps, str(answer)


def _solution(rng: random.Random, steps: list[str], answer: str) -> str:
    lines = [f"Step {i + 1}: {s}." for i, s in enumerate(steps)]
    return " ".join(["Let's think step by step.", *lines, f"So the answer is {answer}.", f"<answer>{answer}</answer>"])


def _render_all_templates(rng: random.Random, question: str, responses: list[str]) -> list[str]:
    """Every SHIPPED template filled with sample values (unknown placeholders get sample prose).

    A prompts file (``--prompts``) never changes the tiny model: its tokenizer is trained on the shipped texts.
    """
    from metamod.prompts import format_responses, get_template, shipped_templates, template_fields

    samples: dict[str, object] = {
        "question": question,
        "confidence": "",
        "peer_responses": format_responses(responses[1:], shipped=True),
        "responses": format_responses(responses, shipped=True),
        "response": responses[0],
        "index": rng.randint(1, 4),
        "guidance": "Check each arithmetic step before giving the answer.",
    }
    out = []
    for name in sorted(shipped_templates()):
        text = get_template(name, shipped=True)
        values = {f: samples.get(f, "a short note about the problem") for f in template_fields(name, shipped=True)}
        try:
            out.append(text.format(**values))
        except (KeyError, ValueError, IndexError, AttributeError):  # e.g. a numeric format spec: use the raw text
            out.append(text)
    return out


def tiny_corpus(*, seed: int = 0, num_problems: int = 300, extra_texts: Sequence[str] = ()) -> list[str]:
    """The tokenizer's training text: prompts, problems, solutions and the moderator protocol, in a fixed order.

    Args:
        seed: seed of the synthetic problems.
        num_problems: how many arithmetic problems to write.
        extra_texts: more text to include (e.g. a task's questions).

    Returns:
        A list of documents.

    >>> docs = tiny_corpus(seed=1, num_problems=5)
    >>> docs == tiny_corpus(seed=1, num_problems=5)
    True
    """
    rng = random.Random(seed)
    docs: list[str] = []
    for i in range(num_problems):
        question, steps, answer = _arith_problem(rng)
        wrong = str(int(answer) + rng.choice([-2, -1, 1, 3]))
        responses = [_solution(rng, steps, answer), _solution(rng, steps, wrong), _solution(rng, steps, answer)]
        docs.append(question)
        docs.extend(responses)
        docs.append("CONTINUE")
        docs.append(f"STOP <answer>{answer}</answer>")
        docs.append(f"STOP\n<answer>{wrong}</answer>")
        if i % 20 == 0:  # templates are long; a few renderings are enough for their words to get merges
            docs.extend(_render_all_templates(rng, question, responses))
    docs.extend(f"Agent {k}:" for k in range(1, 9))
    docs.extend(str(t) for t in extra_texts)
    return docs


# ---------------------------------------------------------------- tokenizer and model


def build_tokenizer(*, seed: int = 0, vocab_size: int = 512, extra_texts: Sequence[str] = ()):
    """Train the byte-level BPE tokenizer and wrap it as a ``PreTrainedTokenizerFast`` with a ChatML template.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` (pad ``<|endoftext|>``, eos ``<|im_end|>``, left padding).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tiny_corpus(seed=seed, extra_texts=extra_texts), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        padding_side="left",
        model_max_length=1 << 30,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def _model_config(args: dict[str, Any], tokenizer):
    from transformers import LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=args["vocab_size"],
        hidden_size=args["hidden_size"],
        intermediate_size=args["intermediate_size"],
        num_hidden_layers=args["num_layers"],
        num_attention_heads=args["num_heads"],
        num_key_value_heads=args["num_kv_heads"],
        max_position_embeddings=args["max_position_embeddings"],
        initializer_range=args["initializer_range"],
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    )
    if args["arch"] == "qwen3":
        return Qwen3Config(head_dim=args["hidden_size"] // args["num_heads"], **common)
    return LlamaConfig(**common)


def _build_args(seed: int, arch: str, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int,
                num_kv_heads: int, intermediate_size: int, max_position_embeddings: int, initializer_range: float,
                extra_texts: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    args = dict(
        seed=seed,
        arch=arch,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
    )
    _check_args(args)
    # The corpus depends on the prompt templates too, so a template edit triggers a rebuild.
    corpus = "\x00".join(tiny_corpus(seed=seed, extra_texts=extra_texts))
    args["corpus_sha256"] = hashlib.sha256(corpus.encode()).hexdigest()
    return args


def build_tiny_model(
    output_dir: str | os.PathLike,
    *,
    seed: int = 0,
    arch: str = "qwen3",
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 2048,
    initializer_range: float = 0.2,
    extra_texts: Sequence[str] = (),
) -> Path:
    """Build the tiny model and its tokenizer and save both (plus a generation config) to ``output_dir``.

    The folder is written atomically (built beside it, then renamed), so a crash never leaves half a model.

    Args:
        output_dir: where to save; replaced if it exists.
        seed: seeds the corpus and ``torch.manual_seed`` before weight init (same seed, same files).
        arch: ``"qwen3"`` or ``"llama"``.
        vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, max_position_embeddings,
            initializer_range: model shape (see :class:`TinyModelConfig`).
        extra_texts: extra tokenizer training text.

    Returns:
        The output folder, loadable with ``AutoModelForCausalLM`` / ``AutoTokenizer``.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    args = _build_args(seed, arch, vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size,
                       max_position_embeddings, initializer_range, extra_texts)  # fmt: skip
    output_dir = Path(output_dir)
    tokenizer = build_tokenizer(seed=seed, vocab_size=vocab_size, extra_texts=extra_texts)
    if len(tokenizer) > vocab_size:
        raise RuntimeError(f"tokenizer has {len(tokenizer)} tokens but the model vocab is {vocab_size}")
    config = _model_config(args, tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    with staged_folder(output_dir) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        atomic_write_json(staging / BUILD_ARGS_FILE, args, indent=2, sort_keys=True)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("Built tiny %s model (%d parameters, %d tokens) in %s", arch, n_params, len(tokenizer), output_dir)
    return output_dir


def ensure_tiny_model(output_dir: str | os.PathLike, **kwargs: Any) -> Path:
    """Return ``output_dir`` with the tiny model, building it only when missing or built with other arguments.

    Args:
        output_dir: the model folder.
        **kwargs: arguments of :func:`build_tiny_model`.

    Returns:
        The model folder.
    """
    import inspect

    output_dir = Path(output_dir)
    params = inspect.signature(build_tiny_model).parameters
    unknown = sorted(set(kwargs) - (set(params) - {"output_dir"}))
    if unknown:
        valid = sorted(p for p in params if p != "output_dir")
        raise TypeError(f"ensure_tiny_model got unknown argument(s) {unknown}; valid: {', '.join(valid)}")
    full = {name: p.default for name, p in params.items() if name != "output_dir"}
    full.update(kwargs)
    wanted = _build_args(**full)
    record = output_dir / BUILD_ARGS_FILE
    if record.is_file() and (output_dir / "config.json").is_file():
        try:
            recorded = json.loads(record.read_text())
        except json.JSONDecodeError:
            recorded = None
        if recorded == wanted:
            logger.info("Tiny model already built in %s", output_dir)
            return output_dir
        changed = sorted(k for k in wanted if not recorded or recorded.get(k) != wanted[k])
        logger.info("Rebuilding tiny model in %s: build arguments changed (%s)", output_dir, ", ".join(changed))
    else:
        logger.info("Building tiny model in %s (not built yet)", output_dir)
    return build_tiny_model(output_dir, **full)
