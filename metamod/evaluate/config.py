"""``EvalConfig`` (the ``metamod eval`` options) and the checks that run before any generation.

Memory options are :class:`metamod.memory.MemoryConfig` fields (``memory``, ``memory_batch_size``, ...), parsed
alongside this dataclass by ``metamod eval``.

>>> cfg = EvalConfig(methods=["majority_vote", "consensus"], tasks=["arith"])
>>> cfg.debate_methods(), cfg.single_methods()
(['majority_vote', 'consensus'], [])
>>> EvalConfig(methods=["majority"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: methods: unknown method(s) ['majority']. Valid names: ace, ace_cold, adjudication_only, ...
>>> EvalConfig(tasks=["arith"], task_batch_questions={"gsm8k": 100})
Traceback (most recent call last):
...
metamod.errors.ConfigError: task_batch_questions has a batch size for 'gsm8k', which is not in tasks ['arith']; expected sizes only for evaluated tasks
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metamod.config import check_fields
from metamod.errors import ConfigError, InputError, check_safetensors, load_json
from metamod.rollout.debate import check_max_rounds, max_rounds_field
from metamod.tasks.config import check_task_selection, task_config_for

from .methods import METHODS, method_spec

DEBATER_KINDS = ("simulated", "hf", "vllm", "openai", "llamacpp")
MODES = ("replay", "live")

#: the paper's order of rows
DEFAULT_METHODS = [
    "single_naive",
    "single_cot",
    "single_reflection",
    "single_cot_sc",
    "majority_vote",
    "consensus",
    "judge",
    "moderator_prompted",
    "moderator",
    "adjudication_only",
    "stopping_only",
]


@dataclass
class EvalConfig:
    """Options of ``metamod eval`` (see docs/evaluation.md)."""

    # ---- what to evaluate
    tasks: list[str] = field(
        default_factory=lambda: ["arith"],
        metadata={"help": "Task names (see docs/tasks.md); name@variant evaluates one task under several labels."},
    )
    task_options: dict = field(
        default_factory=dict,
        metadata={"help": "Per-task TaskConfig fields, e.g. {arith: {task_split: test, task_limit: 200}} (YAML)."},
    )
    limit: int | None = field(
        default=None, metadata={"help": "Questions per task; overrides every task's task_limit (None: keep them)."}
    )
    methods: list[str] = field(
        default_factory=lambda: list(DEFAULT_METHODS),
        metadata={"help": f"Methods to evaluate: {', '.join(sorted(METHODS))}."},
    )
    reference_method: str | None = field(
        default=None,
        metadata={
            "help": "Method compared with every other one by the exact McNemar test; one of `methods`. None: "
            "moderator when it is among methods (else no tests)."
        },
    )
    mode: str = field(
        default="replay",
        metadata={
            "help": "replay: one shared full-length debate per question, replayed per method; live: each "
            "method runs its own debates with the decision layer as stop hook (slower; for checks)."
        },
    )
    traces: str | None = field(
        default=None,
        metadata={
            "help": "Reuse this traces.jsonl (full-length debates) instead of running debates; its questions "
            "are evaluated (filtered by `tasks`)."
        },
    )
    seeds: list[int] = field(
        default_factory=lambda: [0],
        metadata={
            "help": "Evaluation seeds: each seed s reruns the debates (simulated: sim_seed = simulation.sim_seed + s; "
            "LLM: debater a samples with seed s + a, each agent in its own batched call), the tie-breaks and the "
            "single-agent baselines (sampling seed s); metrics pool all seeds."
        },
    )
    # ---- debate
    max_rounds: int = max_rounds_field()
    num_agents: int = field(default=2, metadata={"help": "Number of debaters N."})
    debaters: str = field(
        default="simulated", metadata={"help": f"Debater kind: {', '.join(DEBATER_KINDS)} (a generation backend)."}
    )
    debater_model: str = field(default="", metadata={"help": "Debater model (folder, Hub id or served name)."})
    debater_backend_options: dict = field(
        default_factory=dict, metadata={"help": "Extra BackendConfig fields for the debaters (YAML mapping)."}
    )
    temperature: float = field(default=0.7, metadata={"help": "Debater (and single-agent) sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Debater (and single-agent) nucleus sampling mass."})
    max_tokens: int = field(default=512, metadata={"help": "Debater (and single-agent) max new tokens."})
    stop: list[str] | None = field(
        default=None,
        metadata={"help": "Debater (and single-agent) stop strings, not included (e.g. ['\\nQuestion:'])."},
    )
    simulation: dict = field(
        default_factory=dict,
        metadata={"help": "SimulationConfig fields for simulated debaters (sim_seed is set from each seed)."},
    )
    batch_questions: int = field(
        default=64,
        metadata={"help": "Questions per batch: unit of batched generation, incremental writing and memory batches."},
    )
    task_batch_questions: dict = field(
        default_factory=dict,
        metadata={
            "help": "Per-task batch_questions, e.g. {math500: 50, gsm8k: 100} (MC2 C.8); tasks not listed use "
            "batch_questions. With a memory on, memory batches set every task's batch."
        },
    )
    question_order_seed: int | None = field(
        default=None,
        metadata={
            "help": "None: each task's questions in file order; an int: shuffled with this seed before batching "
            "(with a memory, the order is what it learns from: MC2 appendix F order sensitivity)."
        },
    )
    # ---- decision layers
    moderator: str | None = field(
        default=None,
        metadata={"help": "Trained moderator: a LoRA adapter folder (adapter_config.json) or a full model."},
    )
    moderator_base: str | None = field(
        default=None,
        metadata={
            "help": "Base model of the moderator (prompted moderator; adapter base). None: the adapter's "
            "base_model_name_or_path, else the debater model."
        },
    )
    moderator_backend: str = field(
        default="hf", metadata={"help": "Backend of the moderator: hf, vllm, openai or llamacpp (no LoRA adapter)."}
    )
    moderator_backend_options: dict = field(
        default_factory=dict, metadata={"help": "Extra BackendConfig fields for the moderator (YAML mapping)."}
    )
    moderator_max_tokens: int = field(default=64, metadata={"help": "Max new tokens of a moderator decision."})
    moderator_temperature: float = field(
        default=0.0, metadata={"help": "Moderator temperature (0 = greedy, which makes replay equal live)."}
    )
    moderator_top_logprobs: int = field(
        default=10,
        metadata={
            "help": "Top-k log-probs asked for in the moderator's own call, to read its P(STOP) (p_stop) at no "
            "extra generation; 0: do not ask (a server that rejects logprobs): p_stop is then null, and "
            "moderator_threshold and stop_curve refuse to run. At most 20."
        },
    )
    judge_model: str | None = field(
        default=None, metadata={"help": "LLM judge model. None: the moderator base model, else the debater model."}
    )
    judge_backend: str = field(default="hf", metadata={"help": "Backend of the judge: hf, vllm, openai or llamacpp."})
    judge_max_tokens: int = field(default=512, metadata={"help": "Max new tokens of the judge."})
    fixed_rounds: int = field(default=3, metadata={"help": "Debate length of adjudication_only."})
    sc_samples: int = field(default=5, metadata={"help": "Samples k of single_cot_sc."})
    max_iterations: int = field(
        default=3, metadata={"help": "MRO methods: the iteration budget N (MC2 appendix D uses 3)."}
    )
    mro_simulation: dict = field(
        default_factory=dict,
        metadata={
            "help": "MROSimulationConfig fields for the simulated MRO roles (mro_sim_seed is offset by each seed)."
        },
    )
    code_simulation: dict = field(
        default_factory=dict,
        metadata={
            "help": "CodeSimulationConfig fields for the simulated coder of the code-reasoning methods (marco, "
            "cot, chain_of_code, rhda); code_sim_seed is offset by each seed (docs/marco.md)."
        },
    )
    method_options: dict = field(
        default_factory=dict,
        metadata={
            "help": "Per-method settings by method name, e.g. {tot: {candidates: 5, keep: 2, depth: 2}, mro: "
            "{monitor_max_tokens: 24}} (YAML mapping; each method documents and checks its own keys)."
        },
    )
    # ---- outputs
    output_dir: str = field(default="runs/eval", metadata={"help": "Where results.json, samples.jsonl, table.md go."})
    resume: bool = field(
        default=True,
        metadata={
            "help": "Skip the (task, method, seed, question) cells already in samples.jsonl (computed with these "
            "settings); false: start over, like overwrite."
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "Delete output_dir's samples, cached debates and memory states, and start over."},
    )
    plots: bool = field(default=True, metadata={"help": "Write PNG plots (matplotlib, Agg backend)."})
    stop_curve: bool = field(
        default=False,
        metadata={
            "help": "Replay mode: also ask each moderator-type row's model at EVERY round of every shared debate "
            "(moderator prompts only) and report the accuracy / mean-rounds curve of a threshold on P(STOP), a "
            "reliability diagram and its ECE (results.json stop_curve, stop-curve.jsonl, plots/stop_curve.png, "
            "plots/stop_reliability.png; docs/evaluation.md, 'Calibrated stopping')."
        },
    )

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS and ":" not in m]
        if unknown:
            raise ValueError(f"methods: unknown method(s) {unknown}. Valid names: {', '.join(sorted(METHODS))}")
        if not self.methods:
            raise ValueError("methods is empty; list at least one of " + ", ".join(sorted(METHODS)))
        check_max_rounds(self.max_rounds)
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods lists a method twice: {self.methods}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.debaters not in DEBATER_KINDS:
            raise ValueError(f"debaters must be one of {DEBATER_KINDS}, got {self.debaters!r}")
        if self.debaters != "simulated" and not self.debater_model and self.traces is None:
            raise ValueError(f"debaters={self.debaters!r} needs debater_model (a folder, Hub id or served name)")
        for name in (
            "max_rounds",
            "num_agents",
            "batch_questions",
            "moderator_max_tokens",
            "judge_max_tokens",
            "fixed_rounds",
            "sc_samples",
            "max_tokens",
            "max_iterations",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_agents < 2:
            raise ValueError(f"num_agents must be >= 2 for a debate, got {self.num_agents}")
        if not self.seeds:
            raise ValueError("seeds is empty; give at least one seed, e.g. [0]")
        negative = [s for s in self.seeds if not isinstance(s, int) or s < 0]
        if negative:  # a seed names files (traces-seed<s>.jsonl, memory-seed<s>/) and offsets sampling seeds
            raise ValueError(
                f"seeds {self.seeds}: {negative[0]!r} is not a seed; expected integers >= 0, e.g. [0, 1, 2]"
            )
        repeated = sorted({s for s in self.seeds if self.seeds.count(s) > 1})
        if repeated:
            raise ConfigError(
                f"seeds {self.seeds} repeats {repeated}: a repeated seed counts every question twice and narrows the "
                f"intervals; expected distinct seeds, e.g. {sorted(set(self.seeds))}"
            )
        if self.reference_method is None:
            self.reference_method = "moderator" if "moderator" in self.methods else None
        elif self.reference_method not in self.methods:
            raise ConfigError(
                f"reference_method {self.reference_method!r} is not among methods {self.methods}; expected one of "
                "them (or add it to methods)"
            )
        for name in ("temperature", "moderator_temperature"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 (0 = greedy), got {getattr(self, name)}")
        if not 0 <= self.moderator_top_logprobs <= 20:
            raise ConfigError(
                f"moderator_top_logprobs must be in [0, 20] (0: do not ask), got {self.moderator_top_logprobs}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if "adjudication_only" in self.methods and self.fixed_rounds > self.max_rounds:
            raise ConfigError(
                f"fixed_rounds={self.fixed_rounds} is larger than max_rounds={self.max_rounds}: adjudication_only "
                f"cannot debate longer than the budget; expected fixed_rounds in 1..{self.max_rounds}"
            )
        if not self.tasks and self.traces is None:
            raise ValueError("tasks is empty; list at least one task (e.g. [arith]) or give traces")
        for method, options in self.method_options.items():
            if method not in METHODS and method not in self.methods:  # a typo; a known method may be off
                raise ConfigError(
                    f"method_options has settings for {method!r}, which is no method; valid names: "
                    f"{', '.join(sorted(METHODS))}"
                )
            if not isinstance(options, dict):
                raise ConfigError(f"method_options[{method!r}] must be a mapping of settings, got {options!r}")
        if not isinstance(self.task_batch_questions, dict):
            raise ConfigError(
                f"task_batch_questions must be a mapping of task name to batch size, e.g. {{gsm8k: 100}}; got "
                f"{self.task_batch_questions!r}"
            )
        for task, size in self.task_batch_questions.items():
            if task not in self.tasks:
                raise ConfigError(
                    f"task_batch_questions has a batch size for {task!r}, which is not in tasks {self.tasks}; "
                    "expected sizes only for evaluated tasks"
                )
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ConfigError(
                    f"task_batch_questions[{task!r}] must be an integer >= 1 (questions per batch), got {size!r}"
                )
        check_task_selection(self.tasks, self.task_options, self.limit)
        self._check_nested_keys()
        if self.traces is not None and not Path(self.traces).is_file():
            raise FileNotFoundError(f"traces file {self.traces!r} does not exist")
        if self.traces is not None and not _has_content(Path(self.traces)):
            raise ConfigError(
                f"traces file {self.traces!r} holds 0 traces; expected at least one debate (run `metamod rollout` "
                "first), or leave traces unset to run the debates"
            )

    def _check_nested_keys(self) -> None:
        """The dict-valued options hold only fields of the config they fill (unknown keys name the valid ones)."""
        from metamod.llm import BackendConfig
        from metamod.rollout.coding.simulated import CodeSimulationConfig
        from metamod.rollout.mro.simulated import MROSimulationConfig
        from metamod.rollout.simulated import SimulationConfig

        check_fields("simulation", self.simulation, SimulationConfig)
        check_fields("mro_simulation", self.mro_simulation, MROSimulationConfig)
        check_fields("code_simulation", self.code_simulation, CodeSimulationConfig)
        for name in ("debater_backend_options", "moderator_backend_options"):
            check_fields(name, getattr(self, name), BackendConfig, exclude=("backend", "model", "adapter"))

    def debate_methods(self) -> list[str]:
        return [m for m in self.methods if method_spec(m).replays_debates]

    def single_methods(self) -> list[str]:
        return [m for m in self.methods if m not in self.debate_methods()]

    def needs(self) -> set[str]:
        """The generators the chosen methods need (``moderator``, ``moderator_base``, ``judge``, ``agent``)."""
        needed: set[str] = set()
        for m in self.methods:
            needed.update(method_spec(m).needs)
        if self.single_methods() and self.debaters != "simulated":
            needed.add("agent")
        if self.debaters == "simulated":  # the simulated debaters stand in for the agent (e.g. a gate's samples)
            needed.discard("agent")
        return needed

    def task_config(self, task: str) -> Any:
        """The :class:`metamod.tasks.TaskConfig` of one task entry (:func:`metamod.tasks.config.task_config_for`:
        ``limit``, when set, overrides ``task_limit``; ``name@variant`` is task ``name`` under its own label).

        >>> EvalConfig(methods=["single_cot"], tasks=["arith@easy"], task_options={"arith@easy": {"task_levels": [1]}},
        ...            debaters="simulated").task_config("arith@easy").options()
        {'levels': [1]}
        """
        return task_config_for(task, self.task_options, self.limit)


def classify_model_path(path: str) -> str:
    """``"adapter"``, ``"model"`` or ``"hub"`` for a moderator path; a local path that is neither fails.

    >>> classify_model_path("meta-llama/Llama-3.2-3B-Instruct")
    'hub'
    """
    from metamod.llm.hf import looks_local

    folder = Path(path).expanduser()
    if not looks_local(path):
        if not Path(folder.parts[0]).is_dir():
            return "hub"
        # `checkpoints/tiny` looks like a Hub id, but its first part is a local folder: a missing local path
        raise FileNotFoundError(
            f"moderator {path!r} does not exist (train it first, e.g. `metamod train --config "
            "configs/train/tiny_sim.yaml` writes checkpoints/tiny), or pass a Hub id"
        )
    if (folder / "adapter_config.json").is_file():
        check_adapter_files(folder)
        return "adapter"
    if (folder / "config.json").is_file():
        return "model"
    if not folder.exists():
        raise FileNotFoundError(
            f"moderator {path!r} does not exist; pass an adapter folder (adapter_config.json), "
            "a model folder (config.json) or a Hub id"
        )
    raise ValueError(
        f"moderator {path!r} is neither a LoRA adapter (no adapter_config.json) nor a model (no "
        "config.json); pass e.g. checkpoints/<run>/adapter or a checkpoint-N folder"
    )


def adapter_base(path: str) -> str | None:
    """The ``base_model_name_or_path`` recorded in an adapter folder, if any."""
    data = load_json(Path(path).expanduser() / "adapter_config.json", what="PEFT adapter config (a JSON object)")
    return data.get("base_model_name_or_path") if isinstance(data, dict) else None


def check_adapter_files(folder: str | Path) -> None:
    """Fail naming the file when an adapter folder would not load: its config, its weights and their shapes
    against the config's rank and target modules (:func:`metamod.llm.adapter_files.check_adapter`, the check
    ``metamod export`` runs), before the eval folder is locked or written.

    Raises:
        InputError: ``adapter_config.json`` is not a JSON object, or ``adapter_model.safetensors`` is corrupt.
        ConfigError: the weights do not match the config (a rank or module mismatch).
    """
    from metamod.llm.adapter_files import check_adapter

    folder = Path(folder).expanduser()
    config = load_json(folder / "adapter_config.json", what="PEFT adapter config (a JSON object)")
    if not isinstance(config, dict):
        raise InputError(
            f"{folder / 'adapter_config.json'} holds a JSON {type(config).__name__}; expected a PEFT adapter config "
            "(a JSON object with peft_type, base_model_name_or_path, ...)"
        )
    weights = folder / "adapter_model.safetensors"
    if weights.is_file():
        check_safetensors(weights, what="adapter weights")
        check_adapter(folder)


def _has_content(path: Path) -> bool:
    """Whether a JSONL file has a non-blank line (reads only up to the first one)."""
    with path.open("rb") as handle:
        return any(line.strip() for line in handle)
