"""Optional warm start: a short supervised pass that teaches the moderator's output format before GRPO.

A randomly initialised (tiny) model almost never writes ``CONTINUE`` or ``STOP <answer>...</answer>`` by chance,
so GRPO would see only zero rewards. The warm start fine-tunes the same LoRA adapter on the outputs of a simple
heuristic moderator, then GRPO starts from that adapter. Off by default; on in ``configs/train/tiny_sim.yaml``.

Heuristic targets (:func:`heuristic_target`), from the ``answers`` column of the moderator dataset:

* normal round: ``STOP <answer>a</answer>`` when every debater gave a parsable answer and all agree after
  normalisation (:func:`metamod.tasks.grading.normalize_answer`), else ``CONTINUE``;
* forced-answer round: ``STOP`` + the majority answer (ties go to the lowest agent index); a row where no debater
  has a parsable answer gets no target and is skipped.

The heuristic never sees gold or ``eta``: it only fixes the format and a consensus prior, and GRPO then learns
the rest from the rewards.

``warm_start_targets: reward`` imitates the policy that maximises the CONFIGURED rewards (:func:`reward_target`):
the decision from the row's ``eta`` label, exactly as the control reward reads it (``STOP`` when a correct answer
is on the table, ``CONTINUE`` when none is), and the answer after ``STOP`` by a label-free rule, the majority of
the round's answers (ties: the lowest agent), because the paper's rewards (format + control) never score the
answer. Only when a reward that grades the answer is configured (``answer`` or ``outcome`` in ``reward_funcs``)
does the answer maximising the rewards depend on the gold; then it is a debater's answer the shared grader marks correct, and the run records
``gold_use`` (:func:`warm_start_gold_use`), which ``metamod eval`` shows as a dagger on the methods that use the
adapter. ``warm_start_targets: reward_gold`` always picks the gold-correct answer: gold-supervised adjudication,
an option labelled as such, not the paper's method. With the ``outcome`` reward and no ``control`` reward, the
decision on a row where no correct answer is on the table is the outcome reward's instead: ``CONTINUE`` when the
recorded future, priced at ``outcome_round_cost`` per round, is worth more than 0 (what a wrong ``STOP`` scores),
else ``STOP`` with the majority (:mod:`metamod.rewards.outcome`).

>>> heuristic_target(["12", "12.0"], "math", is_final_round=False)
'STOP <answer>12</answer>'
>>> heuristic_target(["12", "13"], "math", is_final_round=False)
'CONTINUE'
>>> heuristic_target(["12", "13", "13"], "math", is_final_round=True)
'STOP <answer>13</answer>'
>>> heuristic_target([None, None], "math", is_final_round=True) is None
True
>>> reward_target(["12", "13"], "math", gold="13", eta=1, is_final_round=False)  # the label-free majority
'STOP <answer>12</answer>'
>>> reward_target(["12", "13"], "math", gold="13", eta=1, is_final_round=False, gold_answers=True)
'STOP <answer>13</answer>'
>>> reward_target(["12", "14"], "math", gold="13", eta=0, is_final_round=False)
'CONTINUE'
>>> reward_target(["12", "12", "14"], "math", gold="13", eta=0, is_final_round=True)
'STOP <answer>12</answer>'
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

WARM_START_DIR = "warm_start"


def heuristic_target(
    answers: Sequence[str | None], kind: str, *, is_final_round: bool, choices: Sequence[str] | None = None
) -> str | None:
    """The heuristic moderator's output for one round (see the module docstring).

    Agreement and the majority are :func:`metamod.tasks.voting.all_agree` and
    :func:`metamod.tasks.voting.majority_answer` (ties: the lowest-index agent), so a multiple-choice answer
    given as option text (``"dog"``) votes with its letter (``"(B)"``) when ``choices`` is passed.

    Args:
        answers: each debater's extracted answer (``None`` when unparsable), in agent order.
        kind: the answer kind, for normalisation.
        is_final_round: whether this is the forced-answer round.
        choices: the options of a multiple-choice item.

    Returns:
        ``"CONTINUE"``, ``"STOP <answer>...</answer>"``, or ``None`` when there is no sensible target.

    >>> heuristic_target(["(B)", "dog"], "mc", is_final_round=False, choices=["cat", "dog"])
    'STOP <answer>(B)</answer>'
    """
    from metamod.tasks.voting import all_agree, majority_answer

    if not is_final_round:
        if all_agree(answers, kind=kind, choices=choices):
            return f"STOP <answer>{str(answers[0]).strip()}</answer>"
        return "CONTINUE"
    winner = majority_answer(answers, kind=kind, choices=choices, tie_break="first")
    return None if winner is None else f"STOP <answer>{str(winner).strip()}</answer>"


#: how warm-start targets are made: name -> what it reads (``metamod train --warm_start_targets``)
TARGETS = {
    "consensus": "the debaters' answers only (STOP on unanimous agreement, the majority at T_max)",
    "reward": "the policy the configured rewards score highest: the decision from eta (as the control reward; the "
    "outcome reward's continue value where no correct answer is on the table when outcome is configured without "
    "control), the answer by majority (gold-correct when an answer or outcome reward is configured)",
    "reward_gold": "gold-supervised adjudication: the decision from eta and a gold-correct debater answer (not the "
    "paper's method; marked uses_gold)",
}


def warm_start_gold_use(targets: str | None, reward_funcs: Sequence[str]) -> str | None:
    """What gold-derived signal beyond ``eta`` a moderator trained this way learned from (``None``: none).

    ``eta`` itself is every trained moderator's training label (the paper's control reward); what is flagged is
    gold answer SELECTION: an answer reward, or warm-start targets that copy gold-correct answers.

    >>> warm_start_gold_use("reward", ["format", "control"]) is None
    True
    >>> warm_start_gold_use("reward", ["format", "control", "answer"])
    'trained to give gold-correct answers (answer reward; warm start targets the gold-correct answer)'
    >>> warm_start_gold_use("reward_gold", ["format", "control"])
    'trained to give gold-correct answers (warm_start_targets: reward_gold)'
    >>> warm_start_gold_use(None, ["format", "outcome"])
    'trained to give gold-correct answers (outcome reward)'
    """
    reasons = []
    graded = [name for name in ("answer", "outcome") if name in reward_funcs]  # rewards that grade the answer
    if graded:
        reasons.append(
            " and ".join(f"{name} reward" for name in graded)
            + ("; warm start targets the gold-correct answer" if targets == "reward" else "")
        )
    if targets == "reward_gold":
        reasons.append("warm_start_targets: reward_gold")
    return f"trained to give gold-correct answers ({'; '.join(reasons)})" if reasons else None


def reward_target(
    answers: Sequence[str | None],
    kind: str,
    *,
    gold: str,
    eta: int,
    is_final_round: bool,
    choices: Sequence[str] | None = None,
    gold_answers: bool = False,
    outcome_value: float | None = None,
) -> str | None:
    """The output the configured rewards score highest on one round (see the module docstring); ``None``: no target.

    Args:
        answers: each debater's extracted answer (``None`` when unparsable), in agent order.
        kind: the answer kind, for voting and grading.
        gold: the row's gold answer (read only with ``gold_answers``).
        eta: the row's oracle-availability label (1: some debater's answer is correct).
        is_final_round: whether this is the forced-answer round.
        choices: the options of a multiple-choice item.
        gold_answers: answer with a gold-correct debater answer (an answer reward is configured, or
            ``reward_gold``); else with the label-free majority.
        outcome_value: the outcome reward's score for ``CONTINUE`` on this row (decides the ``eta`` 0 rows:
            ``CONTINUE`` only when it is above 0, what a wrong ``STOP`` scores); ``None``: decide by ``eta``.

    >>> reward_target(["12", "14"], "math", gold="13", eta=0, is_final_round=False, outcome_value=-0.05)
    'STOP <answer>12</answer>'

    Returns:
        ``"CONTINUE"``, ``"STOP <answer>...</answer>"``, or ``None`` (no answer parses, or the labels disagree).
    """
    from metamod.tasks.grading import is_equivalent
    from metamod.tasks.voting import majority_answer

    chosen = majority_answer(answers, kind=kind, choices=choices, tie_break="first")
    if gold_answers:
        correct = next((a for a in answers if a is not None and is_equivalent(a, gold, kind, choices=choices)), None)
        if correct is not None:
            chosen = correct
        elif not is_final_round and int(eta) == 1:
            return None  # eta 1 but no graded-correct answer: the labels disagree, skip the row
    if not is_final_round and int(eta) == 0 and (outcome_value is None or outcome_value > 0):
        return "CONTINUE"
    return None if chosen is None else f"STOP <answer>{str(chosen).strip()}</answer>"


def build_warm_start_dataset(
    dataset,
    *,
    max_examples: int | None = None,
    seed: int = 0,
    targets: str = "consensus",
    answer_reward: bool = False,
    outcome_round_cost: float | None = None,
):
    """Turn moderator-dataset rows into prompt-completion rows with heuristic targets.

    Args:
        dataset: a ``datasets.Dataset`` with ``prompt``, ``answers``, ``kind`` and (optionally) ``is_final_round``.
        max_examples: keep at most this many rows (after shuffling with ``seed``).
        seed: shuffle seed.
        targets: ``consensus`` (:func:`heuristic_target`), ``reward`` or ``reward_gold`` (:func:`reward_target`,
            which also needs the ``gold`` and ``eta`` columns).
        answer_reward: whether an answer reward is configured (``reward`` targets then answer with the gold-correct
            answer, which that reward scores highest).
        outcome_round_cost: set when the outcome reward is configured without the control reward: ``reward``
            targets then decide the rows without a correct answer by the outcome reward's ``CONTINUE`` score at
            this cost (needs the ``future_correct`` and ``outcome_estimator`` columns).

    Returns:
        A ``datasets.Dataset`` with columns ``prompt`` and ``completion`` (conversational).
    """
    from datasets import Dataset

    if targets not in TARGETS:
        raise ValueError(f"warm_start_targets must be one of {sorted(TARGETS)}, got {targets!r}")
    needed = {"prompt", "answers", "kind"} | ({"gold", "eta"} if targets != "consensus" else set())
    use_outcome = targets == "reward" and outcome_round_cost is not None
    if use_outcome:
        needed |= {"future_correct", "outcome_estimator"}
    gold_answers = targets == "reward_gold" or (targets == "reward" and answer_reward)
    missing = sorted(needed - set(dataset.column_names))
    if missing:
        raise ValueError(
            f"warm start ({targets} targets) needs dataset columns {missing} (the moderator dataset from "
            f"`metamod build-dataset` has them); got columns {dataset.column_names}. Set warm_start=false or "
            "rebuild the dataset."
        )
    n = len(dataset)
    columns = dataset.column_names
    finals = dataset["is_final_round"] if "is_final_round" in columns else [False] * n
    golds = dataset["gold"] if "gold" in columns else [None] * n
    etas = dataset["eta"] if "eta" in columns else [None] * n
    choices = dataset["choices"] if "choices" in columns else [None] * n
    outcome_values: list[float | None] = [None] * n
    if use_outcome:
        from metamod.rewards.outcome import OutcomeReward

        score = OutcomeReward(outcome_round_cost)
        outcome_values = score(
            ["CONTINUE"] * n, gold=golds, kind=dataset["kind"], future_correct=dataset["future_correct"],
            outcome_estimator=dataset["outcome_estimator"], is_final_round=finals,
        )  # fmt: skip
    rows: list[dict[str, Any]] = []
    for prompt, answers, kind, final, gold, eta, options, outcome_value in zip(
        dataset["prompt"], dataset["answers"], dataset["kind"], finals, golds, etas, choices, outcome_values,
        strict=True,
    ):  # fmt: skip
        if targets != "consensus":
            target = reward_target(
                list(answers),
                kind,
                gold=gold,
                eta=eta,
                is_final_round=bool(final),
                choices=options or None,
                gold_answers=gold_answers,
                outcome_value=outcome_value,
            )
        else:
            target = heuristic_target(list(answers), kind, is_final_round=bool(final), choices=options or None)
        if target is not None:
            rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": target}]})
    if not rows:
        raise ValueError(f"warm start: no row has a {targets} target (no debater answer could be parsed)")
    out = Dataset.from_list(rows).shuffle(seed=seed)
    if max_examples is not None and len(out) > max_examples:
        out = out.select(range(max_examples))
    stops = sum(r["completion"][0]["content"].startswith("STOP") for r in out)
    logger.info(
        "Warm start data (%s targets): %d rows (%d STOP, %d CONTINUE)", targets, len(out), stops, len(out) - stops
    )
    return out


def run_warm_start(
    *,
    model_name_or_path: str,
    peft_config: Any,
    dataset,
    output_dir: str | os.PathLike,
    max_steps: int,
    learning_rate: float,
    batch_size: int,
    max_examples: int | None,
    max_length: int | None,
    seed: int,
    use_cpu: bool,
    bf16: bool,
    model_init_kwargs: dict[str, Any] | None = None,
    tokenizer=None,
    targets: str = "consensus",
    answer_reward: bool = False,
    outcome_round_cost: float | None = None,
) -> Path:
    """Fine-tune a fresh LoRA adapter on heuristic targets with ``trl.SFTTrainer`` and save it.

    Args:
        model_name_or_path: base model folder or Hub id.
        peft_config: the ``peft.LoraConfig`` GRPO will train (same adapter shape).
        dataset: the moderator training split.
        output_dir: where the adapter is saved (``<run>/warm_start``).
        max_steps: optimiser steps.
        learning_rate: peak learning rate (constant after 10% warmup).
        batch_size: per-device batch size.
        max_examples: cap on warm-start rows.
        max_length: truncate prompt+completion to this many tokens.
        seed: seed for shuffling and init.
        use_cpu, bf16: device settings, as for GRPO.
        model_init_kwargs: ``from_pretrained`` kwargs (dtype, attn_implementation, ...).
        tokenizer: tokenizer to use (loaded from the model path when ``None``).
        targets: a key of :data:`TARGETS`.
        answer_reward: whether an answer reward is configured (see :func:`build_warm_start_dataset`).
        outcome_round_cost: the outcome reward's cost when it decides targets (see :func:`build_warm_start_dataset`).

    Returns:
        The folder holding ``adapter_model.safetensors`` and ``adapter_config.json``.
    """
    from trl import SFTConfig, SFTTrainer

    output_dir = Path(output_dir)
    train = build_warm_start_dataset(
        dataset, max_examples=max_examples, seed=seed, targets=targets, answer_reward=answer_reward,
        outcome_round_cost=outcome_round_cost,
    )  # fmt: skip
    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=max_steps,
        learning_rate=learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=max(1, max_steps // 10),
        per_device_train_batch_size=batch_size,
        max_length=max_length,
        logging_steps=max(1, max_steps // 5),
        save_strategy="no",
        report_to="none",
        seed=seed,
        use_cpu=use_cpu,
        bf16=bf16,
        gradient_checkpointing=False,
        model_init_kwargs=model_init_kwargs,
        dataset_num_proc=None,
    )
    logger.info("Warm start: %d SFT steps on %s moderator targets (lr %g)", max_steps, targets, learning_rate)
    trainer = SFTTrainer(
        model=model_name_or_path, args=args, train_dataset=train, processing_class=tokenizer, peft_config=peft_config
    )
    result = trainer.train()
    trainer.save_model(str(output_dir))
    logger.info("Warm start done: loss %.4f; adapter saved to %s", result.training_loss, output_dir)
    return output_dir
