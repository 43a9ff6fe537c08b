"""Turn an :class:`EvalConfig` into generators, debaters and a :class:`LayerContext` (resolution before loading).

:func:`resolve_models` only inspects paths (it fails on a moderator path that is neither an adapter nor a model,
or on a method whose model cannot be determined) so that bad input is caught before any model loads or any
question is generated; :func:`build_generators` then loads each distinct (backend, model, adapter) once.

>>> from metamod.evaluate.config import EvalConfig
>>> resolve_models(EvalConfig(methods=["majority_vote"]))
{}
>>> resolve_models(EvalConfig(methods=["moderator"]))
Traceback (most recent call last):
...
ValueError: method(s) ['moderator'] need a trained moderator: set `moderator` to an adapter folder or a model (e.g. --moderator checkpoints/tiny)
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from metamod.errors import ConfigError
from metamod.llm import BackendConfig, SamplingConfig
from metamod.rollout.debater_factory import DebaterSpec, LoadedBackend, build_debater_groups
from metamod.rollout.simulated import SimulationConfig

from .config import EvalConfig, adapter_base, classify_model_path
from .decision import LayerContext
from .methods import method_spec

logger = logging.getLogger(__name__)


def _backend(backend: str, model: str, adapter: str | None, options: dict[str, Any]) -> BackendConfig:
    try:
        return BackendConfig(backend=backend, model=model, adapter=adapter, **options)
    except TypeError as err:
        valid = ", ".join(f.name for f in dataclasses.fields(BackendConfig))
        raise ValueError(f"bad backend options {sorted(options)} for {model!r}: {err}. Valid: {valid}") from err


#: the training run's summary beside a trained adapter (metamod.train.run_folder.SUMMARY_FILE)
TRAIN_SUMMARY = "train_summary.json"


def moderator_gold_use(config: EvalConfig) -> str | None:
    """How the configured trained moderator used gold beyond ``eta`` (its ``train_summary.json``'s ``gold_use``).

    ``None`` when no moderator is configured, or its folder records no training run (an adapter trained elsewhere:
    logged, since metamod cannot tell).
    """
    if not config.moderator or not Path(config.moderator).expanduser().is_dir():
        return None
    summary = Path(config.moderator).expanduser() / TRAIN_SUMMARY
    if not summary.is_file():
        logger.info("moderator %s has no %s: whether it was trained on gold answers is unknown", config.moderator,
                    TRAIN_SUMMARY)  # fmt: skip
        return None
    from metamod.errors import load_json

    return load_json(summary, what="training summary").get("gold_use")


def _check_model(path: str, what: str) -> None:
    from metamod.llm.hf import looks_local

    if looks_local(path) and not Path(path).expanduser().is_dir():
        raise FileNotFoundError(f"{what} {path!r} does not exist (expected a model folder or a Hub id)")


def resolve_models(config: EvalConfig) -> dict[str, BackendConfig]:
    """Which model serves each role the chosen methods need (no loading).

    Args:
        config: the evaluation config.

    Returns:
        ``{role: BackendConfig}`` for the roles in ``config.needs()`` (``moderator``, ``moderator_base``,
        ``judge``, ``agent``); ``agent`` (the debater model) also whenever LLM debates must be run.

    Raises:
        ValueError / FileNotFoundError: a missing or malformed model path.
    """
    needs = config.needs()
    specs: dict[str, BackendConfig] = {}
    llm_debaters = config.debaters != "simulated"
    # the moderator path is read only when a chosen method uses it (itself, or its recorded base model), so
    # `--methods majority_vote` with a config naming a moderator not trained yet works
    uses_moderator = bool(needs & {"moderator", "moderator_base"}) or ("judge" in needs and not config.judge_model)
    mod_kind = classify_model_path(config.moderator) if config.moderator and uses_moderator else None
    base = config.moderator_base
    if base is None and mod_kind == "adapter":
        base = adapter_base(config.moderator)
    if base is None and llm_debaters:
        base = config.debater_model
    if "moderator" in needs:
        methods = [m for m in config.methods if "moderator" in method_spec(m).needs]
        if not config.moderator:
            raise ValueError(
                f"method(s) {methods} need a trained moderator: set `moderator` to an adapter folder or "
                "a model (e.g. --moderator checkpoints/tiny)"
            )
        if mod_kind == "adapter":
            if not base:
                raise ValueError(f"adapter {config.moderator!r} records no base model; set moderator_base")
            _check_model(base, "moderator_base")
            if Path(base).expanduser().is_dir():  # the LoRA matrices must fit the base's modules (headers only)
                from metamod.llm.adapter_files import check_adapter_fits_base

                check_adapter_fits_base(config.moderator, base)
            specs["moderator"] = _backend(
                config.moderator_backend, base, config.moderator, config.moderator_backend_options
            )
        else:
            specs["moderator"] = _backend(
                config.moderator_backend, config.moderator, None, config.moderator_backend_options
            )
    if "moderator_base" in needs:
        if not base:
            raise ValueError(
                "method moderator_prompted needs the untrained moderator model: set moderator_base "
                "(or moderator to an adapter that records its base model)"
            )
        _check_model(base, "moderator_base")
        specs["moderator_base"] = _backend(config.moderator_backend, base, None, config.moderator_backend_options)
    if "judge" in needs:
        judge = config.judge_model or base
        if not judge:
            raise ValueError("method judge needs a model: set judge_model (or moderator_base)")
        _check_model(judge, "judge_model")
        options = config.moderator_backend_options if config.judge_backend == config.moderator_backend else {}
        specs["judge"] = _backend(config.judge_backend, judge, None, options)
    if "agent" in needs or (llm_debaters and config.traces is None):  # debaters to run, or single baselines
        _check_model(config.debater_model, "debater_model")
        specs["agent"] = _backend(config.debaters, config.debater_model, None, config.debater_backend_options)
    return specs


def build_generators(specs: dict[str, BackendConfig]) -> dict[str, Any]:
    """Load one generator per distinct (backend, model, adapter); roles that share one share the object."""
    from metamod.llm import build_generator

    cache: dict[tuple, Any] = {}
    out = {}
    for role, spec in specs.items():
        key = (spec.backend, spec.model, spec.adapter)
        if key not in cache:
            logger.info("loading %s for %s", spec.model + (f" + {spec.adapter}" if spec.adapter else ""), role)
            cache[key] = build_generator(spec)
        out[role] = cache[key]
    return out


def debater_spec(config: EvalConfig, seed: int) -> DebaterSpec:
    """The debaters' decoding settings for one evaluation seed: the sampling seed is the eval seed itself.

    Agent ``a`` then samples with ``seed + a`` (:func:`metamod.rollout.debater_factory.agent_seed`), as in
    ``metamod rollout`` with ``seed``.

    >>> from metamod.evaluate.config import EvalConfig
    >>> spec = debater_spec(EvalConfig(temperature=1.0, max_tokens=8), seed=3)
    >>> spec.seed, [spec.sampling(a).seed for a in range(2)]
    (3, [3, 4])
    """
    return DebaterSpec(
        temperature=config.temperature,
        top_p=config.top_p,
        max_tokens=config.max_tokens,
        seed=seed,
        stop=list(config.stop) if config.stop else None,
    )


def debater_sampling(config: EvalConfig, seed: int) -> SamplingConfig:
    """Decoding of the single-agent baselines: agent 0's sampling of :func:`debater_spec` (seed = eval seed)."""
    return debater_spec(config, seed).sampling(0)


def build_debaters(config: EvalConfig, seed: int, *, agent: Any = None, memory: Any = None) -> list[Any]:
    """The ``num_agents`` debater groups for one evaluation seed, built by the factory ``metamod rollout`` uses.

    Args:
        config: the evaluation config.
        seed: the evaluation seed (simulated: ``sim_seed = simulation.sim_seed + seed``; LLM: agent ``a`` samples
            with ``seed + a``, each agent in its own batched call).
        agent: the debater generator (LLM debaters), shared with the single-agent baselines.
        memory: passed to LLM debaters (simulated debaters have no prompts to guide).

    Returns:
        ``num_agents`` groups, agent order (see :func:`metamod.rollout.debater_factory.build_debater_groups`).
    """
    spec = debater_spec(config, seed)
    if config.debaters == "simulated":
        options = dict(config.simulation)
        options["sim_seed"] = int(options.get("sim_seed", 0)) + seed
        try:
            sim_config = SimulationConfig(**options)
        except TypeError as err:
            raise ValueError(f"simulation: {err}") from err
        return build_debater_groups(sim_config, spec, config.num_agents)
    if agent is None:
        raise ValueError(f"debaters={config.debaters!r} needs a loaded debater generator")
    return build_debater_groups([LoadedBackend(config.debaters, agent)], spec, config.num_agents, memory=memory)


def layer_context(
    config: EvalConfig, seed: int, generators: dict[str, Any], debaters: list[Any] | None, memory: Any = None
) -> LayerContext:
    """The :class:`LayerContext` shared by every method for one seed."""
    simulated = config.debaters == "simulated"
    return LayerContext(
        max_rounds=config.max_rounds,
        seed=seed,
        moderator=generators.get("moderator"),
        moderator_base=generators.get("moderator_base"),
        judge=generators.get("judge"),
        moderator_sampling=SamplingConfig(
            temperature=config.moderator_temperature,
            max_tokens=config.moderator_max_tokens,
            seed=seed,
            top_logprobs=config.moderator_top_logprobs,
        ),
        judge_sampling=SamplingConfig(temperature=0.0, max_tokens=config.judge_max_tokens, seed=seed),
        fixed_rounds=config.fixed_rounds,
        agent=None if simulated else generators.get("agent"),
        agent_sampling=debater_sampling(config, seed),  # the single agents decode like debater 0
        simulated_agent=debaters[0] if simulated and debaters else None,
        sc_samples=config.sc_samples,
        memory=memory,
        method_options={name: dict(options) for name, options in config.method_options.items()},
        max_iterations=config.max_iterations,
        mro_simulation=_mro_simulation(config, seed) if simulated else None,
        code_simulation=_code_simulation(config, seed) if simulated else None,
    )


def _code_simulation(config: EvalConfig, seed: int) -> Any:
    """The simulated coder's parameters for one evaluation seed (``code_sim_seed`` + seed)."""
    from metamod.rollout.coding.simulated import CodeSimulationConfig

    options = dict(config.code_simulation)
    options["code_sim_seed"] = int(options.get("code_sim_seed", 0)) + seed
    try:
        return CodeSimulationConfig(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"code_simulation: {err}") from err


def _mro_simulation(config: EvalConfig, seed: int) -> Any:
    """The simulated MRO roles' parameters for one evaluation seed (``mro_sim_seed`` + seed)."""
    from metamod.rollout.mro.simulated import MROSimulationConfig

    options = dict(config.mro_simulation)
    options["mro_sim_seed"] = int(options.get("mro_sim_seed", 0)) + seed
    try:
        return MROSimulationConfig(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"mro_simulation: {err}") from err
