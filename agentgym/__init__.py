"""agentgym: Gymnasium-compatible multi-turn environments for LLM agents.

>>> import agentgym, gymnasium as gym
>>> env = gym.make("agentgym/SearchQA-v0")
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step("<search> who directed the film? </search>")
"""

from agentgym import _moved
from agentgym.contract.agent import Agent
from agentgym.contract.branching import branch, restore, snapshot
from agentgym.contract.env import MAX_ACTION_CHARS, AgentEnv, EnvUnavailableError, Snapshot, SnapshotError, StepResult
from agentgym.contract.registry import list_envs, load_plugins, make, register_builtin_envs
from agentgym.contract.spaces import Chat, UnicodeText
from agentgym.contract.trajectory import Trajectory, TrajectoryWriter, Turn, read_trajectories

__version__ = "0.1.0"
__all__ = [
    "MAX_ACTION_CHARS",
    "Agent",
    "AgentEnv",
    "Chat",
    "EnvUnavailableError",
    "Snapshot",
    "SnapshotError",
    "StepResult",
    "Trajectory",
    "TrajectoryWriter",
    "Turn",
    "UnicodeText",
    "branch",
    "list_envs",
    "load_plugins",
    "make",
    "read_trajectories",
    "restore",
    "snapshot",
]

_moved.install()
register_builtin_envs()
load_plugins()
