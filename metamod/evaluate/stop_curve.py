"""The stopping curve: every threshold on the moderator's P(STOP), from ONE pass of moderator calls per debate.

With ``stop_curve: true`` (replay mode) the evaluation asks each moderator-type row's generator (``moderator`` for
``moderator`` and ``moderator_threshold``, ``moderator_base`` for ``moderator_prompted``) at EVERY round of every
replayed debate, exactly as the row itself asks (:meth:`metamod.evaluate.decision.Moderator.ask`: same prompt, the
forced prompt at ``T_max``, one batched call per round, the top-k log-probs of the same request). Only moderator
prompts are generated; the debates are the shared transcripts. One line per (task, seed, role, question) goes to
``stop-curve.jsonl`` (appended per batch and fingerprinted, so an interrupted run resumes where it stopped):
per round ``p_stop``, ``raw``, ``valid``, ``answer`` (a valid ``STOP``'s span; at ``T_max`` the forced answer),
``majority`` (that round's majority vote), ``eta`` (some debater right), whether ``answer`` / ``majority`` are
correct, and the moderator's and the debaters' tokens of the round.

From those lines, :func:`curve_points` applies :func:`metamod.evaluate.stopping.threshold_rule` at every
threshold of :func:`threshold_grid` (accuracy, mean rounds and tokens per threshold, at no generation cost), and
:func:`reliability` bins P(STOP) against the eta rate of the same rounds (expected calibration error). At a
threshold ``tau`` the curve is what ``moderator_threshold`` with ``stop_threshold: tau`` would do on the same
debates (tested at 0.5: the same stop rounds and answers).

>>> step = lambda p, ans, ok, maj_ok: {"p_stop": p, "answer": ans, "answer_correct": ok, "majority": "m",
...     "majority_correct": maj_ok, "eta": 1, "prompt_tokens": 1, "completion_tokens": 1, "debater_tokens": [3, 2]}
>>> q = {"steps": [step(0.3, None, False, False), step(0.9, "4", True, True), step(1.0, "4", True, True)]}
>>> [(p["threshold"], p["accuracy"], p["mean_rounds"]) for p in curve_points([q], [0.2, 0.5, 0.95])]
[(0.2, 0.0, 1.0), (0.5, 1.0, 2.0), (0.95, 1.0, 3.0)]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from metamod.config import settings_fingerprint
from metamod.errors import ConfigError
from metamod.files import JsonlWriter, read_jsonl

from .decision import round_majority
from .methods import build_method
from .replay import prefix
from .stopping import threshold_rule

logger = logging.getLogger(__name__)

STOP_CURVE_FILE = "stop-curve.jsonl"
#: moderator-type rows -> the generator (role) they ask; the curve is one per role
CURVE_ROLES = {"moderator": "moderator", "moderator_threshold": "moderator", "moderator_prompted": "moderator_base"}
#: the fixed threshold grid (0, 0.05, ..., 1); distinct observed values are added when there are few
GRID = tuple(round(0.05 * i, 2) for i in range(21))
#: at most this many distinct observed P(STOP) values are added to the grid
MAX_OBSERVED = 50
#: reliability bins of width 0.1
BINS = 10


def curve_roles(methods: Sequence[str]) -> dict[str, list[str]]:
    """The roles a stopping curve is drawn for, with the configured rows that use each (in config order).

    >>> curve_roles(["majority_vote", "moderator_threshold", "moderator", "moderator_prompted"])
    {'moderator': ['moderator_threshold', 'moderator'], 'moderator_base': ['moderator_prompted']}
    """
    out: dict[str, list[str]] = {}
    for method in methods:
        if method in CURVE_ROLES:
            out.setdefault(CURVE_ROLES[method], []).append(method)
    return out


def check_stop_curve(config: Any, memory_on: bool) -> None:
    """Refuse a stop curve that cannot be drawn: live mode (no shared transcripts), a memory (the guidance the rows
    see would depend on the batch), or no moderator-type row."""
    if not config.stop_curve:
        return
    if config.mode != "replay":
        raise ConfigError("stop_curve needs mode: replay (the curve replays the shared debates); got mode: live")
    if config.moderator_top_logprobs == 0:
        raise ConfigError("stop_curve reads P(STOP) from the moderator's log-probs; got moderator_top_logprobs: 0")
    if memory_on:
        raise ConfigError("stop_curve does not support a memory (the moderator's guidance changes per batch)")
    if not curve_roles(config.methods):
        raise ConfigError(
            f"stop_curve needs a moderator-type method among methods ({', '.join(CURVE_ROLES)}); got {config.methods}"
        )


def role_fingerprint(settings_fp: str, role: str, spec: Any, config: Any) -> str:
    """What a role's curve lines depend on: the shared settings, the role's model and its decoding."""
    import dataclasses

    return settings_fingerprint(
        {
            "settings": settings_fp,
            "role": role,
            "model": dataclasses.asdict(spec) if dataclasses.is_dataclass(spec) else repr(spec),
            "moderator_max_tokens": config.moderator_max_tokens,
            "moderator_temperature": config.moderator_temperature,
            "moderator_top_logprobs": config.moderator_top_logprobs,
        }
    )


def ask_every_round(
    layer: Any, traces: Sequence[dict[str, Any]], grade: Callable[[str | None, str], bool], seed: int
) -> list[list[dict[str, Any]]]:
    """Ask ``layer``'s moderator at every round of every trace: one batched :meth:`ask` per round.

    Args:
        layer: a built :class:`~metamod.evaluate.decision.Moderator` row (its prompts, forced prompt at its last
            round, sampling).
        traces: full-length debates.
        grade: ``grade(answer, question id) -> correct``.
        seed: the evaluation seed (majority tie-break).

    Returns:
        Per trace, one step dict per round ``0..layer.last_round``.
    """
    steps: list[list[dict[str, Any]]] = [[] for _ in traces]
    for t in range(layer.last_round + 1):
        views = [prefix(trace, t) for trace in traces]
        decisions = layer.ask(t, views, final=t >= layer.last_round)
        for i, (trace, decision) in enumerate(zip(traces, decisions, strict=True)):
            qid = str(trace["id"])
            majority = round_majority(trace, t, seed)
            responses = trace["rounds"][t]["responses"]
            steps[i].append(
                {
                    "round": t,
                    "p_stop": decision.p_stop,
                    "raw": decision.raw,
                    "valid": decision.valid,
                    "answer": decision.answer,
                    "answer_correct": grade(decision.answer, qid),
                    "majority": majority,
                    "majority_correct": grade(majority, qid),
                    "eta": trace["rounds"][t].get("eta"),
                    "prompt_tokens": decision.prompt_tokens,
                    "completion_tokens": decision.completion_tokens,
                    "debater_tokens": [
                        sum(int(r.get("prompt_tokens", 0)) for r in responses),
                        sum(int(r.get("completion_tokens", 0)) for r in responses),
                    ],
                }
            )
    return steps


def run_stop_curve(
    config: Any,
    output_dir: Path,
    examples: Mapping[str, Sequence[Any]],
    traces_for: Callable[[str, int], Mapping[str, dict[str, Any]]],
    fingerprints: Mapping[str, str],
    generators: Callable[[list[str]], Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Write the missing lines of ``stop-curve.jsonl`` and return its current lines.

    Args:
        config: the :class:`~metamod.evaluate.config.EvalConfig`.
        output_dir: the evaluation folder.
        examples: questions by task.
        traces_for: ``(task, seed) -> {question id: full-length trace}``.
        fingerprints: per role, :func:`role_fingerprint`.
        generators: ``[roles] -> {role: generator}`` (called only when lines are missing).
    """
    from metamod.tasks.grading import is_equivalent

    from .build import layer_context

    path = output_dir / STOP_CURVE_FILE
    roles = curve_roles(config.methods)
    lines = [line for line in read_jsonl(path) if line.get("fingerprint") == fingerprints.get(line.get("role"))]
    done = {(ln["task"], ln["seed"], ln["role"], ln["id"]) for ln in lines}
    todo = {
        (task, seed, role): [ex for ex in exs if (task, seed, role, ex.id) not in done]
        for seed in config.seeds
        for task, exs in examples.items()
        for role in roles
    }
    todo = {k: v for k, v in todo.items() if v}
    if not todo:
        return lines
    built = generators(sorted({role for (_, _, role) in todo}))
    with JsonlWriter(path) as sink:
        for (task, seed, role), exs in todo.items():
            context = layer_context(config, seed, dict(built), None, None)
            layer = build_method("moderator_prompted" if role == "moderator_base" else "moderator", context)
            by_id = {ex.id: ex for ex in exs}
            traces = traces_for(task, seed)

            def grade(answer: str | None, qid: str, by_id: dict[str, Any] = by_id) -> bool:
                ex = by_id[qid]
                return answer is not None and bool(is_equivalent(answer, ex.gold, ex.kind, ex.choices))

            for start in range(0, len(exs), config.batch_questions):
                batch = exs[start : start + config.batch_questions]
                missing = [ex.id for ex in batch if ex.id not in traces]
                if missing:
                    raise ConfigError(f"stop_curve: no debate transcript for question(s) {missing[:3]} of {task!r}")
                steps = ask_every_round(layer, [traces[ex.id] for ex in batch], grade, seed)
                new = [
                    {"task": task, "seed": seed, "role": role, "id": ex.id, "fingerprint": fingerprints[role],
                     "steps": s}
                    for ex, s in zip(batch, steps, strict=True)
                ]  # fmt: skip
                sink.write_many(new)
                sink.sync()
                lines.extend(new)
                logger.info("stop curve %s seed %d %s: %d more questions", task, seed, role, len(new))
    return lines


def stop_curve_section(
    config: Any,
    output_dir: Path,
    examples: Mapping[str, Sequence[Any]],
    reused: Mapping[tuple[str, str], dict[str, Any]],
    specs: Mapping[str, Any],
    settings_fp: str,
    rows: Sequence[Mapping[str, Any]],
    loaded: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The evaluation's hook: complete ``stop-curve.jsonl`` for the current questions and seeds, then
    :func:`stop_curve_results` (``results.json``'s ``stop_curve``).

    ``reused`` are the given ``traces`` (``config.traces``), else the debates come from ``traces-seed<s>.jsonl``;
    ``loaded`` generators are reused, the others are loaded only when lines are missing.
    """
    from metamod.rollout.traces import read_traces

    from .build import build_generators

    roles = curve_roles(config.methods)
    fingerprints = {role: role_fingerprint(settings_fp, role, specs[role], config) for role in roles}
    cache: dict[int, dict[str, dict[str, Any]]] = {}

    def traces_for(task: str, seed: int) -> Mapping[str, dict[str, Any]]:
        if config.traces:
            return {ex.id: reused[(task, ex.id)] for ex in examples[task] if (task, ex.id) in reused}
        if seed not in cache:
            cache[seed] = {t["id"]: t for t in read_traces(output_dir / f"traces-seed{seed}.jsonl")}
        return cache[seed]

    def generators(needed: list[str]) -> dict[str, Any]:
        have = dict(loaded or {})
        out = {r: have[r] for r in needed if r in have}
        missing = {r: specs[r] for r in needed if r not in out}
        return {**out, **(build_generators(missing) if missing else {})}

    lines = run_stop_curve(config, output_dir, examples, traces_for, fingerprints, generators)
    current = {(task, ex.id) for task, exs in examples.items() for ex in exs}
    lines = [ln for ln in lines if (ln["task"], ln["id"]) in current and ln["seed"] in config.seeds]
    return stop_curve_results(lines, rows, config.methods)


# --------------------------------------------------------------------------------------------- the curve


def threshold_grid(p_values: Iterable[float | None]) -> list[float]:
    """:data:`GRID` plus the distinct observed values when there are at most :data:`MAX_OBSERVED` of them.

    >>> threshold_grid([0.123, None, 0.5])[:4]
    [0.0, 0.05, 0.1, 0.123]
    """
    observed = {round(float(p), 6) for p in p_values if p is not None}
    grid = set(GRID) | (observed if len(observed) <= MAX_OBSERVED else set())
    return sorted(grid)


def replay_threshold(steps: Sequence[Mapping[str, Any]], tau: float) -> tuple[int, str | None, bool, str, int]:
    """One question under :func:`~metamod.evaluate.stopping.threshold_rule` at ``tau``.

    Returns:
        ``(stop round, answer, correct, answer_source, tokens)``: tokens are the debaters' and the moderator's,
        prompt and completion, of rounds ``0..stop``.
    """
    tokens = 0
    last = len(steps) - 1
    for t, step in enumerate(steps):
        tokens += sum(step["debater_tokens"]) + int(step["prompt_tokens"]) + int(step["completion_tokens"])
        if t >= last:
            return t, step["answer"], bool(step["answer_correct"]), "forced", tokens
        stop, answer, source = threshold_rule(step["p_stop"], step["answer"], step["majority"], tau)
        if stop:
            correct = step["answer_correct"] if source == "moderator" else step["majority_correct"]
            return t, answer, bool(correct), str(source), tokens
    raise ValueError("a stop-curve line has no steps")


def curve_points(questions: Sequence[Mapping[str, Any]], thresholds: Sequence[float]) -> list[dict[str, Any]]:
    """Accuracy, mean rounds and mean tokens (debaters + moderator) per threshold over ``questions``' steps."""
    points = []
    n = len(questions)
    for tau in thresholds:
        outcomes = [replay_threshold(q["steps"], tau) for q in questions]
        points.append(
            {
                "threshold": tau,
                "accuracy": sum(o[2] for o in outcomes) / n if n else 0.0,
                "mean_rounds": sum(o[0] + 1 for o in outcomes) / n if n else 0.0,
                "mean_tokens": sum(o[4] for o in outcomes) / n if n else 0.0,
                "moderator_answers": sum(o[3] == "moderator" for o in outcomes),
                "majority_answers": sum(o[3] == "majority" for o in outcomes),
                "forced_answers": sum(o[3] == "forced" for o in outcomes),
            }
        )
    return points


def reliability(questions: Sequence[Mapping[str, Any]], bins: int = BINS, key: str = "p_stop") -> dict[str, Any]:
    """P(STOP) of the stop decisions (rounds before ``T_max``) binned against the eta rate of those rounds.

    ``ece`` is the count-weighted mean gap ``|mean P(STOP) - eta rate|`` over the non-empty bins; ``p_stop_missing``
    counts the decisions whose P(STOP) could not be read (left out). ``key`` names the probability read from each
    step and in the output (``mean_<key>``, ``<key>_missing``): the MRO Controller's P(Accept) uses ``p_accept``.

    >>> q = {"steps": [{"p_stop": 0.95, "eta": 1}, {"p_stop": 0.05, "eta": 0}, {"p_stop": None, "eta": 1},
    ...                {"p_stop": 1.0, "eta": 1}]}
    >>> r = reliability([q]); r["ece"], r["steps"], r["p_stop_missing"], [b["count"] for b in r["bins"]]
    (0.05, 2, 1, [1, 1])
    """
    pairs, missing = [], 0
    for q in questions:
        for step in q["steps"][:-1]:
            if step[key] is None:
                missing += 1
            elif step.get("eta") is not None:
                pairs.append((float(step[key]), int(step["eta"])))
    out_bins = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(p, e) for p, e in pairs if lo <= p < hi or (b == bins - 1 and p == hi)]
        if inside:
            out_bins.append(
                {
                    "low": lo,
                    "high": hi,
                    "count": len(inside),
                    f"mean_{key}": sum(p for p, _ in inside) / len(inside),
                    "eta_rate": sum(e for _, e in inside) / len(inside),
                }
            )
    total = len(pairs)
    ece = sum(b["count"] / total * abs(b[f"mean_{key}"] - b["eta_rate"]) for b in out_bins) if total else None
    return {"bins": out_bins, "ece": None if ece is None else round(ece, 6), "steps": total, f"{key}_missing": missing}


def stop_curve_results(
    lines: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], methods: Sequence[str]
) -> dict[str, Any]:
    """``results.json``'s ``stop_curve``: per task and role, the threshold points, the reliability diagram and the
    live rows' own points (accuracy, mean rounds, mean tokens from ``samples.jsonl``) to compare with."""
    roles = curve_roles(methods)
    out: dict[str, Any] = {}
    for task in sorted({ln["task"] for ln in lines}):
        out[task] = {}
        for role, role_methods in roles.items():
            questions = [ln for ln in lines if ln["task"] == task and ln["role"] == role]
            if not questions:
                continue
            grid = threshold_grid(s["p_stop"] for q in questions for s in q["steps"][:-1])
            out[task][role] = {
                "methods": role_methods,
                "questions": len(questions),
                "points": curve_points(questions, grid),
                "reliability": reliability(questions),
                "live": _live_points(rows, task, role_methods),
            }
    return out


def _live_points(rows: Sequence[Mapping[str, Any]], task: str, methods: Sequence[str]) -> dict[str, Any]:
    out = {}
    for method in methods:
        records = [r["methods"][method] for r in rows if r["task"] == task and method in r.get("methods", {})]
        if not records:
            continue
        n = len(records)
        out[method] = {
            "accuracy": sum(bool(r["correct"]) for r in records) / n,
            "mean_rounds": sum(int(r["rounds"]) for r in records) / n,
            "mean_tokens": sum(sum(int(v) for v in r["tokens"].values()) for r in records) / n,
        }
    return out


def write_stop_plots(stop_curve: Mapping[str, Any], labels: Mapping[str, str], folder: Path, simulated: bool) -> None:
    """``stop_curve.png`` (accuracy vs mean rounds per threshold, live rows marked) and ``stop_reliability.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [(task, role, c) for task, by_role in stop_curve.items() for role, c in by_role.items()]
    if not curves:
        return
    folder.mkdir(parents=True, exist_ok=True)
    suffix = " (simulated)" if simulated else ""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for task, role, curve in curves:
        xs = [p["mean_rounds"] for p in curve["points"]]
        ys = [100 * p["accuracy"] for p in curve["points"]]
        (line,) = ax.plot(xs, ys, marker=".", label=f"{task}: P(STOP) >= tau ({role})")
        for method, live in curve["live"].items():
            ax.plot(live["mean_rounds"], 100 * live["accuracy"], marker="*", markersize=12, linestyle="none",
                    color=line.get_color(), label=f"{task}: {labels.get(method, method)}")  # fmt: skip
    ax.set_xlabel("mean rounds")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Stopping curve: threshold on P(STOP)" + suffix)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "stop_curve.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    for task, role, curve in curves:
        bins = curve["reliability"]["bins"]
        ece = curve["reliability"]["ece"]
        ax.plot([b["mean_p_stop"] for b in bins], [b["eta_rate"] for b in bins], marker="o",
                label=f"{task} ({role}), ECE {ece if ece is None else round(ece, 3)}")  # fmt: skip
        for b in bins:
            ax.annotate(str(b["count"]), (b["mean_p_stop"], b["eta_rate"]), fontsize=6)
    ax.set_xlabel("P(STOP) (bin mean)")
    ax.set_ylabel("eta rate (some debater right)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title("Reliability of P(STOP)" + suffix)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "stop_reliability.png", dpi=120)
    plt.close(fig)
