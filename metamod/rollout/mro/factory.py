"""The MRO roles of ``metamod rollout`` (``loop: mro``) from its ``roles`` setting. (The evaluation's MRO methods
build theirs from the evaluation's own generators, the agent model and the moderator: evaluate/mro/methods.py.)

The ``roles`` setting is one of:

* ``"simulated"`` -- the three simulated roles (:mod:`metamod.rollout.mro.simulated`);
* one backend mapping (:class:`~metamod.llm.BackendConfig` keys, e.g. ``{backend: hf, model: smollm2-135m-instruct}``)
  shared by the three roles;
* a mapping ``{reasoner: ..., monitor: ..., controller: ...}`` with one entry per role, each ``"simulated"`` or a
  backend mapping, so roles may use different backends and models.

A backend mapping may also hold decoding keys (``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed``) that
override the run's decoding for that role, and the controller's may hold ``protocol``: ``prompted`` (ACCEPT / PATCH
/ RESTART, the default) or ``moderator`` (a trained moderator adapter: STOP / CONTINUE,
:class:`~metamod.rollout.mro.roles.ModeratorController`). Backends with identical settings are loaded once.

>>> from metamod.llm.base import SamplingConfig
>>> roles = build_mro_roles("simulated", SamplingConfig())
>>> roles.simulated, roles.controller.role
(True, 'controller')
>>> role_specs({"backend": "hf", "model": "m", "max_tokens": 64})["monitor"]
{'backend': 'hf', 'model': 'm', 'max_tokens': 64}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from metamod.config import ConfigError
from metamod.llm.base import Generator, SamplingConfig
from metamod.rollout.mro.loop import MRORoles
from metamod.rollout.mro.roles import LLMController, LLMMonitor, LLMReasoner, ModeratorController
from metamod.rollout.mro.simulated import MROSimulationConfig, SimulatedController, SimulatedMonitor, SimulatedReasoner
from metamod.rollout.mro.traces import ROLES

SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "stop", "seed")
PROTOCOLS = ("prompted", "moderator")


def parse_roles_setting(value: Any) -> Any:
    """The ``roles`` setting as Python data: ``"simulated"``, or a mapping (JSON text on the command line works).

    >>> parse_roles_setting('{"backend": "hf", "model": "m"}')
    {'backend': 'hf', 'model': 'm'}
    """
    if isinstance(value, str):
        text = value.strip()
        if text == "simulated":
            return text
        if text.startswith("{"):
            try:
                return json.loads(text)
            except json.JSONDecodeError as err:
                raise ConfigError(f"roles: not valid JSON ({err}): {text[:80]!r}") from err
        raise ConfigError(
            f"roles must be 'simulated', one backend mapping or {{reasoner: ..., monitor: ..., controller: ...}}, "
            f"got {text[:80]!r}"
        )
    if isinstance(value, dict):
        return value
    raise ConfigError(f"roles must be 'simulated' or a mapping, got {type(value).__name__} {value!r:.80}")


def role_specs(value: Any) -> dict[str, Any]:
    """One entry per role (``"simulated"`` or a backend mapping), checked; see the module docstring."""
    value = parse_roles_setting(value)
    if value == "simulated":
        return dict.fromkeys(ROLES, "simulated")
    if any(key in value for key in ROLES):
        unknown = sorted(set(value) - set(ROLES))
        missing = [r for r in ROLES if r not in value]
        if unknown or missing:
            raise ConfigError(
                f"roles: per-role mapping needs exactly the keys {list(ROLES)}; missing {missing}, unknown {unknown}"
            )
        specs, shared = {r: value[r] for r in ROLES}, False
    else:
        specs, shared = dict.fromkeys(ROLES, value), True
    from metamod.llm import BackendConfig

    valid = {f.name for f in dataclasses.fields(BackendConfig)} | set(SAMPLING_KEYS)
    for role, spec in specs.items():
        if spec == "simulated":
            continue
        name = "roles" if shared else f"roles.{role}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{name} must be 'simulated' or a backend mapping, got {spec!r:.80}")
        allowed = valid | ({"protocol"} if role == "controller" and not shared else set())
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise ConfigError(f"{name}: unknown key(s) {unknown}; valid keys: {', '.join(sorted(allowed))}")
        if "model" not in spec:
            raise ConfigError(f"{name} needs model (a folder, Hub id or served name), got keys {sorted(spec)}")
        if role == "controller" and spec.get("protocol", "prompted") not in PROTOCOLS:
            raise ConfigError(f"roles.controller.protocol must be one of {PROTOCOLS}, got {spec['protocol']!r}")
    return specs


def _sampling(base: SamplingConfig, spec: dict[str, Any]) -> SamplingConfig:
    overrides = {k: spec[k] for k in SAMPLING_KEYS if k in spec}
    return dataclasses.replace(base, n=1, **overrides)


def build_mro_roles(
    value: Any,
    sampling: SamplingConfig,
    sim_config: MROSimulationConfig | None = None,
    *,
    memory: Any = None,
    load: Callable[[Any], Generator] | None = None,
    loaded: dict[str, Generator] | None = None,
) -> MRORoles:
    """Build the three roles from a ``roles`` setting.

    Args:
        value: the ``roles`` setting (see the module docstring).
        sampling: the run's decoding (per-role keys override it).
        sim_config: parameters of simulated roles.
        memory: passed to LLM roles (its guidance, per role name, is prepended to their prompts).
        load: builds a generator from a :class:`~metamod.llm.BackendConfig` (default: ``build_generator``).
        loaded: generators already loaded, by model name (eval shares its agent generator this way); a backend
            mapping whose ``model`` is a key here uses that generator instead of loading one.

    Returns:
        The :class:`~metamod.rollout.mro.MRORoles`.
    """
    from metamod.llm import BackendConfig

    specs = role_specs(value)
    sim_config = sim_config or MROSimulationConfig()
    if load is None:
        from metamod.llm import build_generator as load
    generators: dict[str, Generator] = {}
    built = []
    simulated = {"reasoner": SimulatedReasoner, "monitor": SimulatedMonitor, "controller": SimulatedController}
    for role in ROLES:
        spec = specs[role]
        if spec == "simulated":
            built.append(simulated[role](sim_config))
            continue
        backend_keys = {k: v for k, v in spec.items() if k not in SAMPLING_KEYS and k != "protocol"}
        key = json.dumps(backend_keys, sort_keys=True, default=str)
        if key not in generators:
            if loaded and spec["model"] in loaded:
                generators[key] = loaded[spec["model"]]
            else:
                generators[key] = load(BackendConfig(**backend_keys))
        settings = {"adapter": spec["adapter"]} if spec.get("adapter") else None
        kwargs = dict(backend=spec.get("backend", "hf"), memory=memory, settings=settings)
        role_sampling = _sampling(sampling, spec)
        if role == "reasoner":
            built.append(LLMReasoner(generators[key], role_sampling, **kwargs))
        elif role == "monitor":
            built.append(LLMMonitor(generators[key], role_sampling, **kwargs))
        elif spec.get("protocol", "prompted") == "moderator":
            built.append(ModeratorController(generators[key], role_sampling, **kwargs))
        else:
            built.append(LLMController(generators[key], role_sampling, **kwargs))
    return MRORoles(*built)
