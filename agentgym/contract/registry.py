"""The env registry: agentgym's envs are ordinary Gymnasium registrations under the ``agentgym/`` namespace.

``import agentgym`` registers the built-in envs and then every third-party plugin: a package lists a
callable in the ``agentgym.envs`` entry-point group, and agentgym calls it once. In the plugin's
``pyproject.toml``::

    [project.entry-points."agentgym.envs"]
    mypkg = "mypkg.envs:register"   # register() calls gymnasium.register(id="mypkg/MyEnv-v0", ...)

>>> import agentgym
>>> "agentgym/SearchQA-v0" in agentgym.list_envs()
True
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import gymnasium as gym

ENTRY_POINT_GROUP = "agentgym.envs"
NAMESPACE = "agentgym"


@dataclass(frozen=True)
class BuiltinEnv:
    """A built-in env: its Gymnasium id, entry point and default constructor arguments."""

    id: str
    entry_point: str
    kwargs: tuple[tuple[str, Any], ...] = ()


BUILTIN_ENVS: tuple[BuiltinEnv, ...] = (
    BuiltinEnv("agentgym/SearchQA-v0", "agentgym.envs.search_qa.env:SearchQAEnv"),
    BuiltinEnv("agentgym/SearchQARoles-v0", "agentgym.envs.search_qa.roles:SearchQARolesEnv"),  # M-ASK's two roles
    BuiltinEnv("agentgym/Household-v0", "agentgym.envs.household.env:HouseholdEnv"),
    BuiltinEnv("agentgym/ToolUse-v0", "agentgym.envs.tool_use.env:ToolUseEnv"),
    BuiltinEnv("agentgym/CodeExec-v0", "agentgym.envs.code_exec.env:CodeExecEnv"),
    BuiltinEnv("agentgym/SQL-v0", "agentgym.envs.sql.env:SQLEnv"),
    BuiltinEnv("agentgym/MCPTools-v0", "agentgym.envs.mcp_tools.env:MCPToolsEnv"),  # tools from an MCP server
    BuiltinEnv("agentgym/Sokoban-v0", "agentgym.envs.sokoban.env:SokobanEnv"),
    BuiltinEnv("agentgym/Shop-v0", "agentgym.envs.shop.env:ShopEnv"),
    BuiltinEnv("agentgym/Clarify-v0", "agentgym.envs.user_sim.clarify:ClarifyEnv"),
    BuiltinEnv("agentgym/Preference-v0", "agentgym.envs.user_sim.preference:PreferenceEnv"),
    BuiltinEnv("agentgym/TwentyQuestions-v0", "agentgym.envs.user_sim.twenty_questions:TwentyQuestionsEnv"),
    BuiltinEnv("agentgym/CustomerService-v0", "agentgym.envs.user_sim.customer_service:CustomerServiceEnv"),
    # Credit-assignment diagnostics: a horizon knob, verified progress, anchors shared by identical states.
    BuiltinEnv("agentgym/Chain-v0", "agentgym.envs.diagnostics.chain:ChainEnv"),
    BuiltinEnv("agentgym/Umbrella-v0", "agentgym.envs.diagnostics.umbrella:UmbrellaEnv"),
    BuiltinEnv("agentgym/KeyDoor-v0", "agentgym.envs.diagnostics.key_door:KeyDoorEnv"),
    # Adapters to the real benchmarks. Without their package or data they still construct (no built-in agents,
    # `unavailable_reason` says what to install or download) and reset() raises EnvUnavailableError.
    BuiltinEnv("agentgym/TextWorld-v0", "agentgym.envs.household.textworld_adapter:TextWorldEnv"),
    BuiltinEnv("agentgym/ALFWorld-v0", "agentgym.envs.household.alfworld_adapter:ALFWorldEnv"),
    BuiltinEnv("agentgym/WebShop-v0", "agentgym.envs.shop.webshop:WebShopEnv"),
    BuiltinEnv("agentgym/BFCL-v0", "agentgym.envs.bfcl.env:BFCLEnv"),
)


def register_builtin_envs() -> None:
    """Register the built-in envs with Gymnasium (idempotent)."""
    for env in BUILTIN_ENVS:
        if env.id not in gym.registry:
            gym.register(id=env.id, entry_point=env.entry_point, kwargs=dict(env.kwargs))


def load_plugins() -> list[str]:
    """Call every ``agentgym.envs`` entry point; a broken plugin warns instead of breaking the import."""
    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()()
            loaded.append(ep.name)
        except Exception as e:  # a third-party bug must not make agentgym unimportable
            warnings.warn(f"agentgym plugin {ep.name!r} ({ep.value}) failed to register: {e!r}", stacklevel=2)
    return loaded


def list_envs() -> list[str]:
    """Ids of the registered envs that are ``AgentEnv`` subclasses or live in the agentgym namespace."""
    return sorted(env_id for env_id, spec in gym.registry.items() if spec.namespace == NAMESPACE or _is_agent_env(spec))


def _is_agent_env(spec: gym.envs.registration.EnvSpec) -> bool:
    """Whether the spec makes an ``AgentEnv`` (a string entry point is imported, except Gymnasium's own)."""
    from agentgym.contract.env import AgentEnv

    entry: object = spec.entry_point
    if isinstance(entry, str):
        if entry.startswith("gymnasium."):
            return False
        try:
            entry = gym.envs.registration.load_env_creator(entry)
        except Exception:  # a registration whose module does not import is not ours to list
            return False
    return isinstance(entry, type) and issubclass(entry, AgentEnv)


def unavailable_reason(env: gym.Env) -> str | None:
    """Why an adapter env cannot run here (its package or data is missing), or None if it can."""
    return getattr(env.unwrapped, "unavailable_reason", None)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` for agentgym envs (a thin layer: same arguments, same wrappers)."""
    return gym.make(env_id, **kwargs)
