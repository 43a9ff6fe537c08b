"""Learning curves of a training run: what the policy did, step by step, on its own samples and on held-out rounds.

Three pieces, hooked into ``metamod train``:

* :class:`ProtocolMetrics` wraps the first reward function and, through TRL's ``log_metric`` reward keyword, logs
  per generation batch the share of completions that follow the protocol (``protocol/format_valid``:
  :func:`metamod.rewards.parse_decision` says ``valid``) and the share that open with ``STOP``
  (``protocol/stop_rate``). TRL averages them per logging step. The wrapped reward's values are unchanged.
* :class:`HeldoutControlCallback` (``curve_eval_steps > 0``): at the start and every N steps it generates greedy
  decisions with the current adapter for a fixed, seeded sample of held-out rounds (the validation split, or train
  rows left out by ``max_train_examples``: the source is recorded) and scores ``heldout/control_accuracy`` (STOP iff
  ``eta`` on non-final rounds; an output with no decision word is wrong), ``heldout/stop_rate`` and
  ``heldout/format_valid``.
* :func:`write_curves` turns ``trainer.state.log_history`` (+ the held-out points) into ``curves.json``,
  ``curves.md`` and ``plots/learning_curves.png`` in the run folder; :func:`zero_variance_summary` gives the
  ``frac_reward_zero_std`` / ``reward_std`` first/last/mean of ``train_summary.json``.

>>> hist = [{"step": 1, "reward": 0.5, "frac_reward_zero_std": 1.0, "reward_std": 0.0},
...         {"step": 2, "reward": 0.7, "frac_reward_zero_std": 0.5, "reward_std": 0.2}]
>>> zero_variance_summary(hist)["frac_reward_zero_std"]
{'first': 1.0, 'last': 0.5, 'mean': 0.75}
>>> [p["format_valid"] for p in curve_points(hist, reward_names=[])]
[None, None]
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from metamod.rewards import completion_text, parse_decision

logger = logging.getLogger(__name__)

CURVES_FILE = "curves.json"
CURVES_TABLE = "curves.md"
CURVES_PLOT = "plots/learning_curves.png"
#: per logging step, the TRL / metamod metrics a curve follows (log key -> curve name)
STEP_METRICS = {
    "reward": "reward",
    "protocol/format_valid": "format_valid",
    "protocol/stop_rate": "stop_rate",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "reward_std": "reward_std",
    "refill/dropped_groups": "refill_dropped_groups",
    "refill/calls": "refill_calls",
    "refill/still_constant": "refill_still_constant",
}
HELDOUT_METRICS = ("control_accuracy", "stop_rate", "format_valid")


# ---------------------------------------------------------------- protocol metrics of the training completions


def protocol_rates(completions: Sequence[Any]) -> tuple[float, float]:
    """``(share valid under the protocol, share whose action is STOP)`` of some completions.

    >>> protocol_rates(["CONTINUE", "STOP", "STOP <answer>4</answer>", "hm"])
    (0.5, 0.5)
    """
    decisions = [parse_decision(completion_text(c)) for c in completions]
    n = max(len(decisions), 1)
    return sum(d.valid for d in decisions) / n, sum(d.action == "STOP" for d in decisions) / n


class ProtocolMetrics:
    """A reward function that returns ``reward``'s values unchanged and logs the protocol rates via ``log_metric``.

    Keeps the wrapped reward's ``__name__`` (the logged reward key).

    >>> logged = {}
    >>> wrapped = ProtocolMetrics(lambda completions, **kw: [1.0] * len(completions))
    >>> wrapped(["CONTINUE", "oops"], log_metric=logged.__setitem__), logged
    ([1.0, 1.0], {'protocol/format_valid': 0.5, 'protocol/stop_rate': 0.0})
    """

    def __init__(self, reward: Callable[..., list[float | None]]):
        self.reward = reward
        self.__name__ = getattr(reward, "__name__", type(reward).__name__)

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        values = self.reward(completions=completions, **kwargs)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            valid, stop = protocol_rates(completions)
            log_metric("protocol/format_valid", valid)
            log_metric("protocol/stop_rate", stop)
        return values

    def __repr__(self) -> str:
        return f"ProtocolMetrics({self.reward!r})"


def with_protocol_metrics(reward_funcs: list[Callable]) -> list[Callable]:
    """The reward functions with the first one wrapped in :class:`ProtocolMetrics` (values unchanged)."""
    return [ProtocolMetrics(reward_funcs[0]), *reward_funcs[1:]] if reward_funcs else reward_funcs


# ---------------------------------------------------------------- held-out control accuracy


def heldout_sample(
    validation: Any | None, unused_train: Any | None, *, rows: int, seed: int
) -> tuple[list[dict[str, Any]], str]:
    """A fixed, seeded sample of held-out rounds and where it comes from.

    Args:
        validation: the validation split (preferred) or ``None`` / empty.
        unused_train: train rows the run does not train on (left out by ``max_train_examples``), or ``None``.
        rows: sample size (``curve_eval_rows``).
        seed: sampling seed.

    Returns:
        ``(rows, source)`` with source ``"validation split"`` or ``"train rows not used for training"``.

    Raises:
        ConfigError: neither source holds a row.
    """
    for data, source in ((validation, "validation split"), (unused_train, "train rows not used for training")):
        if data is not None and len(data):
            picked = sorted(random.Random(seed).sample(range(len(data)), min(rows, len(data))))
            return [dict(data[i]) for i in picked], source
    from metamod.errors import ConfigError

    raise ConfigError(
        "curve_eval_steps > 0 needs held-out rounds: the dataset has no (non-empty) validation split and "
        "max_train_examples leaves no train row out; build the dataset with validation_fraction > 0, set "
        "max_train_examples below the train split's size, or set curve_eval_steps: 0"
    )


def score_decisions(texts: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Held-out scores of greedy decisions: control accuracy (STOP iff eta, non-final rounds; no decision word is
    wrong), STOP rate and format validity (all rounds).

    >>> rows = [{"eta": 1, "is_final_round": False}, {"eta": 0, "is_final_round": False},
    ...         {"eta": 0, "is_final_round": False}, {"eta": 1, "is_final_round": True}]
    >>> score_decisions(["STOP <answer>1</answer>", "CONTINUE", "what", "STOP <answer>2</answer>"], rows)
    {'control_accuracy': 0.6667, 'stop_rate': 0.5, 'format_valid': 0.75}
    """
    decisions = [parse_decision(t) for t in texts]
    scored = [
        d.action is not None and (d.action == "STOP") == bool(r["eta"])
        for d, r in zip(decisions, rows, strict=True)
        if not r.get("is_final_round")
    ]
    n = max(len(decisions), 1)
    return {
        "control_accuracy": round(sum(scored) / len(scored), 4) if scored else None,
        "stop_rate": round(sum(d.action == "STOP" for d in decisions) / n, 4),
        "format_valid": round(sum(d.valid for d in decisions) / n, 4),
    }


def greedy_decisions(
    model: Any, tokenizer: Any, prompts: Sequence[Any], *, max_new_tokens: int, batch_size: int,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[str]:  # fmt: skip
    """Greedy completions of chat prompts, in left-padded batches (the model's mode is restored after)."""
    import torch

    was_training = model.training
    model.eval()
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    texts: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = [
                tokenizer.apply_chat_template(
                    p, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
                )
                for p in prompts[start : start + batch_size]
            ]
            batch = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.no_grad():
                out = model.generate(
                    **batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
            texts += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return texts


class HeldoutControlCallback(TrainerCallback):
    """Every ``every`` steps (and at the start), score greedy decisions of the current adapter on held-out rounds.

    The points are kept in :attr:`points` (exact steps, for ``curves.json``) and also put into the trainer's metrics
    as ``heldout/*`` so that TRL logs them (to ``trainer_state.json`` and the trackers) at the next logging step.
    Every process evaluates the same rows (safe under sharded models).
    """

    def __init__(self, trainer: Any, rows: list[dict[str, Any]], source: str, *, every: int):
        self.trainer, self.rows, self.source, self.every = trainer, rows, source, every
        self.points: list[dict[str, Any]] = []

    def evaluate(self, step: int, *, log: bool = True) -> dict[str, Any]:
        """Score the current adapter; ``log``: also hand the scores to TRL's metrics (not before the first step,
        where they would be averaged into the first logged step)."""
        trainer = self.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        texts = greedy_decisions(
            model, trainer.processing_class, [r["prompt"] for r in self.rows],
            max_new_tokens=trainer.args.max_completion_length, batch_size=trainer.args.per_device_eval_batch_size,
            chat_template_kwargs=getattr(trainer.args, "chat_template_kwargs", None),
        )  # fmt: skip
        point = {"step": step, **score_decisions(texts, self.rows)}
        self.points.append(point)
        for name in HELDOUT_METRICS if log else ():
            if point[name] is not None:
                trainer._metrics["train"][f"heldout/{name}"].append(point[name])
        logger.info("held-out rounds @%d: %s", step, {k: v for k, v in point.items() if k != "step"})
        return point

    def on_train_begin(self, args, state, control, **kwargs):
        self.evaluate(state.global_step, log=False)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.evaluate(state.global_step)


def add_heldout_callback(
    trainer: Any, args: Any, *, tokenizer: Any, unused_train: Any | None
) -> HeldoutControlCallback | None:
    """Add the held-out callback when ``args.curve_eval_steps`` asks for it (``None`` otherwise).

    The rows: the ``dataset_eval_split`` of ``args.dataset_path`` (its prompts over ``max_prompt_tokens`` dropped,
    as for training), else ``unused_train`` (:func:`heldout_sample`).
    """
    if not args.curve_eval_steps:
        return None
    from metamod.train import common

    validation = None
    if args.dataset_eval_split:
        try:
            validation = common.load_split(args.dataset_path, args.dataset_eval_split)
        except FileNotFoundError:
            validation = None
        if validation is not None and len(validation):
            validation = common.drop_long_prompts(
                validation, tokenizer, args.max_prompt_tokens, where="held-out curve rows"
            )
    rows, source = heldout_sample(validation, unused_train, rows=args.curve_eval_rows, seed=args.seed)
    callback = HeldoutControlCallback(trainer, rows, source, every=args.curve_eval_steps)
    trainer.add_callback(callback)
    return callback


# ---------------------------------------------------------------- curves from the log history


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"first": values[0], "last": values[-1], "mean": round(sum(values) / len(values), 6)}


def zero_variance_summary(log_history: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float] | None]:
    """First / last / mean over logged steps of ``frac_reward_zero_std`` and ``reward_std`` (``None`` if never)."""
    return {
        key: _stats([float(h[key]) for h in log_history if "reward" in h and h.get(key) is not None])
        for key in ("frac_reward_zero_std", "reward_std")
    }


def curve_points(log_history: Sequence[Mapping[str, Any]], *, reward_names: Sequence[str]) -> list[dict[str, Any]]:
    """One point per logged training step: total reward, each reward component, the protocol rates, zero-variance
    and refill metrics (``None`` where a metric was not logged)."""
    points = []
    for entry in log_history:
        if "reward" not in entry:
            continue
        point: dict[str, Any] = {"step": entry.get("step")}
        point.update({name: entry.get(key) for key, name in STEP_METRICS.items()})
        point["rewards"] = {name: entry.get(f"rewards/{name}/mean") for name in reward_names}
        points.append(point)
    return points


def curves_table(points: Sequence[Mapping[str, Any]], heldout: Sequence[Mapping[str, Any]]) -> str:
    """The curves as one markdown table by step (held-out columns filled at the steps they were measured)."""
    from metamod.train.model_card import markdown_table

    names = sorted({n for p in points for n in p.get("rewards", {})})
    by_step = {p["step"]: p for p in heldout}
    steps = sorted({p["step"] for p in points} | set(by_step))
    train = {p["step"]: p for p in points}
    header = ["step", "reward", *names, "format valid", "STOP rate", "frac zero std", "reward std"]
    refill = [k for k in ("refill_dropped_groups", "refill_calls", "refill_still_constant")
              if any(p.get(k) is not None for p in points)]  # fmt: skip
    header += [k.replace("_", " ") for k in refill]
    if heldout:
        header += ["held-out control acc", "held-out STOP rate", "held-out format valid"]
    rows = []
    for step in steps:
        p, h = train.get(step, {}), by_step.get(step, {})
        row = [step, p.get("reward"), *(p.get("rewards", {}).get(n) for n in names), p.get("format_valid"),
               p.get("stop_rate"), p.get("frac_reward_zero_std"), p.get("reward_std"), *(p.get(k) for k in refill)]  # fmt: skip
        if heldout:
            row += [h.get(name) for name in HELDOUT_METRICS]
        rows.append(["" if v is None else v for v in row])
    return markdown_table(header, rows)


def plot_curves(points: Sequence[Mapping[str, Any]], heldout: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Four panels by step: rewards, protocol rates, zero-variance, held-out scores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def line(ax, xs, ys, label):
        pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if pairs:
            ax.plot(*zip(*pairs, strict=True), marker="o", markersize=3, label=label)

    steps = [p["step"] for p in points]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0][0]
    line(ax, steps, [p["reward"] for p in points], "total")
    for name in sorted({n for p in points for n in p.get("rewards", {})}):
        line(ax, steps, [p["rewards"].get(name) for p in points], name)
    ax.set_title("training reward (mean per step)")
    ax = axes[0][1]
    line(ax, steps, [p["format_valid"] for p in points], "format valid")
    line(ax, steps, [p["stop_rate"] for p in points], "STOP rate")
    ax.set_title("training completions")
    ax.set_ylim(-0.05, 1.05)
    ax = axes[1][0]
    line(ax, steps, [p["frac_reward_zero_std"] for p in points], "frac_reward_zero_std")
    line(ax, steps, [p["reward_std"] for p in points], "reward_std")
    ax.set_title("zero-variance groups")
    ax = axes[1][1]
    for name in HELDOUT_METRICS:
        line(ax, [h["step"] for h in heldout], [h[name] for h in heldout], name.replace("_", " "))
    ax.set_title("held-out rounds (greedy)" if heldout else "held-out rounds: off (curve_eval_steps 0)")
    ax.set_ylim(-0.05, 1.05)
    for ax in axes.flat:
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_curves(
    output_dir: str | Path,
    log_history: Sequence[Mapping[str, Any]],
    *,
    reward_names: Sequence[str],
    heldout: HeldoutControlCallback | None = None,
) -> dict[str, Any]:
    """Write ``curves.json``, ``curves.md`` and ``plots/learning_curves.png`` into ``output_dir``.

    Returns:
        The ``curves.json`` document: ``{"steps": [...], "heldout": {"source", "rows", "points"} | None}``.
    """
    from metamod.files import atomic_write_json, atomic_write_text

    output_dir = Path(output_dir)
    points = curve_points(log_history, reward_names=reward_names)
    held = list(heldout.points) if heldout is not None else []
    document = {
        "steps": points,
        "heldout": None if heldout is None else {"source": heldout.source, "rows": len(heldout.rows), "points": held},
    }
    atomic_write_json(output_dir / CURVES_FILE, document, indent=2, sort_keys=False)
    source = f"\n\nHeld-out: greedy decisions on {len(heldout.rows)} rounds of the {heldout.source}." if heldout else ""
    atomic_write_text(output_dir / CURVES_TABLE, "# Learning curves\n\n" + curves_table(points, held) + source + "\n")
    plot_curves(points, held, output_dir / CURVES_PLOT)
    return document


def copy_curves(run_dir: str | Path | None, destination: str | Path) -> str | None:
    """Copy a run's curve files (``curves.json``, ``curves.md``, the plot) into an export folder and return the
    model card's "Learning curves" text (the table and a link to the plot), or ``None`` when the run has none."""
    import shutil

    if run_dir is None or not (Path(run_dir) / CURVES_TABLE).is_file():
        return None
    run_dir, destination = Path(run_dir), Path(destination)
    for name in (CURVES_FILE, CURVES_TABLE, CURVES_PLOT):
        if (run_dir / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run_dir / name, destination / name)
    text = (run_dir / CURVES_TABLE).read_text().split("\n", 2)[-1].strip()  # without the "# Learning curves" title
    if (run_dir / CURVES_PLOT).is_file():
        text = f"![learning curves]({CURVES_PLOT})\n\n{text}"
    return text
