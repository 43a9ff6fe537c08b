"""``metamod demo``: the whole pipeline on the embedded default, on a CPU, in about a quarter of an hour.

The real world (default): rollout (two SmolLM2-135M-Instruct debaters on direct arithmetic questions) ->
moderator dataset (eta labels) -> SmolLM2 + LoRA moderator trained with a warm start + GRPO -> evaluation against
the baselines and the stopping-only ablation on held-out questions -> adapter export with its model card ->
``<output_dir>/report.md``. ``--world simulated`` runs the same stages on simulated debaters with the tiny random
model (mechanics in a few minutes; every number labelled simulated).

Each stage runs through the same command entry points a user calls (``metamod rollout``, ``build-dataset``,
``train``, ``eval``, ``export``) with the shipped configs, so the demo exercises exactly the user-facing paths.
Stages whose outputs already exist are skipped (``--force`` reruns them), so an interrupted demo resumes.
results.json records which world produced it (``simulated: true/false``).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from metamod.config import ConfigError, parse_config, save_resolved_config

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    """The shipped configs and the sizes of one demo world (sized for ~15 minutes on 2 cores, install included)."""

    rollout_config: str
    train_config: str
    eval_config: str
    train_questions: int
    eval_questions: int
    output_dir: str
    #: evaluation rows of the demo (None: the eval config's list)
    methods: tuple[str, ...] | None = None
    #: build the offline tiny model for training (the simulated world)
    tiny_model: bool = False
    #: SFT warm-start and GRPO steps (None: the train config's)
    warm_start_steps: int | None = None
    grpo_steps: int | None = None


WORLDS: dict[str, World] = {
    # SmolLM2-135M-Instruct debaters, moderator (+ LoRA), judge and single agents, on direct arithmetic.
    "real": World(
        rollout_config="configs/rollout/smol_arith.yaml",
        train_config="configs/train/smol_moderator.yaml",
        eval_config="configs/eval/smol_debate.yaml",
        train_questions=28,
        eval_questions=32,
        output_dir="checkpoints/demo",
        # measured 2026-12-03 on 2 slow cores: ~3 s per SFT step (4 rows), ~60 s per GRPO step (8 completions of
        # SmolLM2 + a backward pass). 16 SFT steps on 28 debates make the moderator that stops; one GRPO step shows
        # the stage (configs/train/smol_moderator.yaml: 24 + 12, measured in benchmarks/README.md, where GRPO after
        # the warm start changed no decision). 12 SFT steps on 24 debates gave a moderator that never stopped.
        warm_start_steps=16,
        grpo_steps=1,
        # the rows the demo has time for, both ablations included (stopping vs adjudication); the benchmark run
        # evaluates every method, the LLM judge too (benchmarks/README.md)
        methods=(
            "single_cot",
            "majority_vote",
            "consensus",
            "moderator_prompted",
            "moderator",
            "adjudication_only",
            "stopping_only",
        ),
    ),  # fmt: skip
    # seeded simulated debaters and the tiny random model: mechanics, in a few minutes.
    "simulated": World(
        rollout_config="configs/rollout/sim_arith.yaml",
        train_config="configs/train/tiny_sim.yaml",
        eval_config="configs/eval/sim_debate.yaml",
        train_questions=400,
        eval_questions=200,
        output_dir="checkpoints/demo-simulated",
        tiny_model=True,
    ),
}


@dataclass
class DemoConfig:
    """Options of ``metamod demo`` (paths are relative to the repository root)."""

    world: str = field(
        default="real",
        metadata={
            "help": "real: the embedded SmolLM2-135M-Instruct plays every role (debaters, moderator + LoRA, judge) "
            "on direct arithmetic; simulated: seeded simulated debaters and the tiny random model (fast, mechanics "
            "only, labelled simulated)."
        },
    )
    output_dir: str | None = field(
        default=None,
        metadata={"help": "Folder for every artefact and report.md (None: checkpoints/demo, or demo-simulated)."},
    )
    rollout_config: str | None = field(
        default=None, metadata={"help": "Rollout config for the training debates (None: the world's)."}
    )
    train_config: str | None = field(default=None, metadata={"help": "Moderator training config (None: the world's)."})
    eval_config: str | None = field(default=None, metadata={"help": "Evaluation config (None: the world's)."})
    train_questions: int | None = field(
        default=None,
        metadata={
            "help": "Training debates: the first N questions of the rollout config's tasks (its `limit`; None: the "
            "world's: real 28 of 160, simulated 400 of 400)."
        },
    )
    eval_questions: int | None = field(
        default=None, metadata={"help": "Held-out evaluation questions (None: the world's: real 32, simulated 200)."}
    )
    warm_start_steps: int | None = field(
        default=None, metadata={"help": "SFT warm-start steps (None: the world's: real 16, simulated the config's)."}
    )
    grpo_steps: int | None = field(
        default=None, metadata={"help": "GRPO steps (None: the world's: real 4, simulated the train config's)."}
    )
    quick: bool = field(
        default=False,
        metadata={"help": "A reduced-size run for tests and smoke checks (few questions and steps; not meaningful)."},
    )
    force: bool = field(default=False, metadata={"help": "Rerun every stage even when its outputs exist."})

    def __post_init__(self) -> None:
        if self.world not in WORLDS:
            raise ConfigError(f"world must be one of {', '.join(WORLDS)}, got {self.world!r}")
        defaults = WORLDS[self.world]
        for name in ("rollout_config", "train_config", "eval_config", "output_dir", "train_questions",
                     "eval_questions", "warm_start_steps", "grpo_steps"):  # fmt: skip
            if getattr(self, name) is None:
                setattr(self, name, getattr(defaults, name))
        for name in ("rollout_config", "train_config", "eval_config"):
            path = Path(getattr(self, name))
            if not path.is_file():
                raise ConfigError(
                    f"{name}={path} not found; run `metamod demo` from the repository root or pass --{name} PATH"
                )
        if self.train_questions < 10 or self.eval_questions < 2:
            raise ConfigError(
                f"train_questions must be >= 10 and eval_questions >= 2, got {self.train_questions} and "
                f"{self.eval_questions}"
            )
        if self.quick:
            self.train_questions = min(self.train_questions, 24 if self.world == "simulated" else 12)
            self.eval_questions = min(self.eval_questions, 6 if self.world == "simulated" else 4)
            self.warm_start_steps = 2 if self.warm_start_steps is None else min(self.warm_start_steps, 2)
            self.grpo_steps = 2 if self.grpo_steps is None else min(self.grpo_steps, 2)


@dataclass
class Stage:
    """One pipeline stage: a command entry point, its arguments, and the file that proves it finished."""

    name: str
    entry: Callable[[list[str]], int]
    argv: list[str]
    done_marker: Path


def plan(config: DemoConfig) -> tuple[list[Stage], dict[str, Path]]:
    """The demo's stages and artefact paths (pure: nothing runs)."""
    from metamod.evaluate.harness import main as eval_main
    from metamod.rollout.run import main as rollout_main
    from metamod.rollout.snapshots import main as dataset_main
    from metamod.train.export import main as export_main
    from metamod.train.grpo import main as train_main

    out = Path(config.output_dir)
    paths = {
        "traces": out / "rollout" / "traces.jsonl",
        "dataset": out / "dataset",
        "tiny_model": out / "tiny-model",
        "moderator": out / "moderator",
        "eval": out / "eval",
        "export": out / "export",
    }
    world = WORLDS[config.world]
    train_argv = [
        "--config", config.train_config,
        "--output_dir", str(paths["moderator"]),
        "--dataset_path", str(paths["dataset"]),
        "--report_to", "none",
    ]  # fmt: skip
    if world.tiny_model:
        train_argv += ["--model_name_or_path", str(paths["tiny_model"])]
    eval_argv = ["--config", config.eval_config, "--moderator", str(paths["moderator"]),
                 "--output_dir", str(paths["eval"]), "--limit", str(config.eval_questions)]  # fmt: skip
    if world.methods:
        eval_argv += ["--methods", *world.methods]
    if config.grpo_steps is not None:
        train_argv += ["--max_steps", str(config.grpo_steps), "--save_steps", str(max(config.grpo_steps, 1))]
    if config.warm_start_steps is not None:
        train_argv += ["--warm_start_steps", str(config.warm_start_steps)]
    if config.quick:
        train_argv += ["--logging_steps", "1", "--warmup_steps", "0", "--sample_log_steps", "1"]
    stages = [
        Stage(
            "rollout",
            rollout_main,
            ["--config", config.rollout_config, "--output_dir", str(paths["traces"].parent),
             "--limit", str(config.train_questions), "--progress", "false"],
            paths["traces"].parent / "summary.json",
        ),
        Stage(
            "build-dataset",
            dataset_main,
            ["--traces", str(paths["traces"]), "--output_dir", str(paths["dataset"])],
            paths["dataset"] / "dataset_dict.json",
        ),
        Stage("train", train_main, train_argv, paths["moderator"] / "train_summary.json"),
        Stage(
            "eval",
            eval_main,
            eval_argv,
            paths["eval"] / "results.json",
        ),
        Stage(
            "export",
            export_main,
            ["--adapter", str(paths["moderator"]), "--output_dir", str(paths["export"]),
             "--results", str(paths["eval"] / "results.json"), "--dataset_path", str(paths["dataset"]),
             "--overwrite", "true"],
            paths["export"] / "README.md",
        ),
    ]  # fmt: skip
    return stages, paths


def run_demo(config: DemoConfig) -> Path:
    """Run every stage (skipping finished ones unless ``force``) and write ``report.md``; returns its path."""
    out = Path(config.output_dir)
    if config.force and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    save_resolved_config(out / "demo_config.yaml", config)
    stages, paths = plan(config)
    timings: dict[str, float] = {}
    for stage in stages:
        if stage.done_marker.exists():
            logger.info("demo: %s already done (%s exists); skipping", stage.name, stage.done_marker)
            timings[stage.name] = 0.0
            continue
        logger.info("demo: running `metamod %s %s`", stage.name, " ".join(stage.argv))
        started = time.perf_counter()
        code = stage.entry(stage.argv)
        timings[stage.name] = time.perf_counter() - started
        if code:
            raise RuntimeError(f"demo stage {stage.name!r} failed with exit code {code}")
        if not stage.done_marker.exists():
            raise RuntimeError(f"demo stage {stage.name!r} finished but {stage.done_marker} is missing")
    report = write_report(out, paths, timings, quick=config.quick, world=config.world)
    return report


def write_report(
    out: Path, paths: dict[str, Path], timings: dict[str, float], *, quick: bool, world: str = "real"
) -> Path:
    """``report.md``: the evaluation table, the plots, training numbers and where every artefact is."""
    rollout_summary = json.loads((paths["traces"].parent / "summary.json").read_text())
    train_summary = json.loads((paths["moderator"] / "train_summary.json").read_text())
    results = json.loads((paths["eval"] / "results.json").read_text())
    table = (paths["eval"] / "table.md").read_text().strip()
    simulated = bool(results.get("simulated", rollout_summary.get("simulated", False)))
    label = "SIMULATED" if simulated else f"real ({world} world)"
    lines = [
        f"# metamod demo report ({label} debates)",
        "",
        "Everything below was produced by `make demo` / `metamod demo` on this machine"
        + (" with `--quick` (reduced sizes: the numbers are a smoke check, not a result)." if quick else "."),
        "Debaters are simulated (a seeded stochastic model of debate dynamics, see docs/rollout.md); the moderator"
        " is the tiny offline model trained with a warm start + GRPO + LoRA."
        if simulated
        else "Real debates: the embedded SmolLM2-135M-Instruct plays both debaters, the judge, the prompted moderator"
        " (Meta-Moderator*) and the single agents; the Meta-Moderator is SmolLM2 + LoRA trained on these debates"
        " with an SFT warm start + GRPO (format + control rewards), on direct arithmetic questions (arith level 0;"
        " evaluation on the held-out test stream). The warm start imitates the policy those rewards score highest:"
        " STOP when a correct answer is on the table (eta, the control reward's label), with the debaters' majority"
        " answer, since the rewards never score the answer (no gold answer is imitated). A 135M model is weak:"
        " read the intervals.",
        "",
        "## Evaluation",
        "",
        table,
        "",
    ]
    for png in sorted((paths["eval"] / "plots").glob("*.png")):
        lines += [f"![{png.stem}]({png.relative_to(out).as_posix()})", ""]
    lines += [
        "## Training",
        "",
        f"- debates: {rollout_summary.get('total_traces')} questions, eta rate by round "
        f"{rollout_summary.get('eta_rate_by_round')}, coverage {rollout_summary.get('coverage')}",
        f"- train stage (warm start + {train_summary.get('global_step')} GRPO steps): "
        f"{train_summary.get('wall_time_s', 0):.0f} s; warm-start targets: "
        f"{train_summary.get('warm_start_targets')}; gold answers imitated: "
        f"{train_summary.get('gold_use') or 'none (the paper rewards: format + control)'}",
        f"- mean reward, first vs last logged step: {_reward(train_summary.get('first_logged'))} -> "
        f"{_reward(train_summary.get('last_logged'))}",
        "",
        "## Artefacts",
        "",
        "| stage | where | seconds |",
        "|---|---|---|",
    ]
    where = {
        "rollout": paths["traces"],
        "build-dataset": paths["dataset"],
        "train": paths["moderator"],
        "eval": paths["eval"],
        "export": paths["export"],
    }
    for stage, path in where.items():
        lines.append(f"| {stage} | `{path.as_posix()}` | {timings.get(stage, 0.0):.1f} |")
    lines += ["", f"The exported adapter's model card is `{(paths['export'] / 'README.md').as_posix()}`.", ""]
    report = out / "report.md"
    report.write_text("\n".join(line for line in lines if line is not None))
    return report


def _reward(entry: dict | None) -> str:
    if not entry:
        return "n/a"
    value = entry.get("reward")
    return f"{value:.3f}" if isinstance(value, int | float) else "n/a"


def main(argv: list[str] | None = None) -> int:
    """``metamod demo [--world real|simulated] [--quick] [--output_dir DIR]``."""
    (config,) = parse_config([DemoConfig], argv, prog="metamod demo")
    started = time.perf_counter()
    report = run_demo(config)
    table = (Path(config.output_dir) / "eval" / "table.md").read_text()
    print(table)
    print(f"demo finished in {time.perf_counter() - started:.0f} s; report: {report}")
    return 0
