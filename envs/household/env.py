"""Household-v0: a fast, offline, deterministic ALFWorld-like text world.

Each episode is one generated task (see ``world``): a room of numbered receptacles, objects, and a goal of one
of ALFWorld's six task types, played with ALFWorld's commands and feedback (``engine``). The episode ends when
the goal holds (``info["won"]``, reward ``success_reward``) or after ``max_turns`` (50) turns.

``info`` on every turn: ``admissible_commands`` (sorted), ``won``, ``task_type``, ``anchor`` (task id and a
64-bit Zobrist hash of the full state); after ``reset`` also ``gold`` (the task record, privileged: type, object,
receptacle and the ``spec`` that regenerates the task). With ``expert_plan=True`` also ``expert_plan`` (a
shortest command list from the current state), ``plan_length`` (its length: the verifiable remaining distance to
the goal) and ``progress`` (``1 - plan_length / initial plan_length``; 1.0 at the goal, negative after detours)
for process rewards such as ``agentgym.rewards.wrappers.ProgressReward``.

The trade-off: a plan costs an A* search (about 0.3 ms) whenever the agent leaves the previous plan in a state
it has not planned from (following the plan, and states equal up to what plans depend on, are free). Under a
random policy that is about a fifth of the steps, which takes the env from about 40,000 to about 7,000 steps/s on
one core (``bench/bench_household.py``); under a model-driven policy it is negligible. Plans are therefore off by
default; the ``oracle`` agent does not need them (it plans on its own copy of the task, rebuilt from
``info["gold"]``).

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/Household-v0", split="train", expert_plan=True)
>>> obs, info = env.reset(seed=0, options={"task_index": 3})
>>> info["task_type"], info["expert_plan"][:2]
('pick_heat_then_place_in_recep', ['go to cabinet 10', 'open cabinet 10'])
>>> obs, reward, terminated, truncated, info = env.step("go to cabinet 10")
>>> obs[0]["content"], info["plan_length"], round(info["progress"], 3)
('You arrive at cabinet 10. The cabinet 10 is closed.', 6, 0.143)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, TruncatedActionError, is_blank, parse_tag_action
from agentgym.contract.trust import declare, flag, integer, list_of, number, one_of
from agentgym.envs.household import facts
from agentgym.envs.household.agents import HeuristicAgent, OracleAgent, RandomAgent
from agentgym.envs.household.catalog import TASK_TYPES
from agentgym.envs.household.engine import NOTHING, PUT_STYLES, Engine
from agentgym.envs.household.planner import PlanKeyer, expert_plan
from agentgym.envs.household.prompts import PROMPTS, VerlStep, first_message, render_admissible
from agentgym.envs.household.world import DIFFICULTIES, SPLIT_SIZES, SPLITS, GenConfig, Task, generate_task

_PLAN_MEMO_LIMIT = 4096


def make_config(
    difficulty: str = "default",
    *,
    max_receptacles: int | None = None,
    distractors: Sequence[int] | None = None,
    closed_prob: float | None = None,
    target_instances: Sequence[int] | None = None,
    task_types: Sequence[str] | None = None,
) -> GenConfig:
    """A preset of ``DIFFICULTIES`` with the given knobs overridden."""
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {tuple(DIFFICULTIES)}, got {difficulty!r}")
    base = DIFFICULTIES[difficulty]
    return GenConfig(
        max_receptacles=base.max_receptacles if max_receptacles is None else int(max_receptacles),
        distractors=base.distractors if distractors is None else tuple(distractors),
        closed_prob=base.closed_prob if closed_prob is None else float(closed_prob),
        target_instances=base.target_instances if target_instances is None else tuple(target_instances),
        task_types=base.task_types if task_types is None else tuple(task_types),
    )


class HouseholdEnv(AgentEnv):
    """ALFWorld-like household tasks (see the module docstring).

    Args:
        split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"`` (held-out rooms and goal combinations).
        difficulty: ``"easy"``, ``"default"`` or ``"hard"`` (a ``GenConfig`` preset); the next five knobs
            override single fields of it.
        max_receptacles, distractors, closed_prob, target_instances, task_types: see ``GenConfig``.
        num_tasks: tasks per split that seeds draw from (default: ALFWorld's 3553 / 140 / 134);
            ``options={"task_index": i}`` plays task ``i`` (``0 <= i < num_tasks``).
        prompt: ``"plain"`` (bare commands) or ``"verl"`` (verl-agent's prompt, ``<action>`` tags).
        put_style: ``"put"`` (``put O in/on R``, ALFWorld 0.4) or ``"move"`` (``move O to R``, 0.5) in the
            admissible commands and feedback; both forms are always accepted.
        success_reward: reward (component ``outcome``) when the goal is reached (verl-agent uses 10).
        invalid_action_penalty: subtracted (component ``format``) for an invalid command (verl-agent: 0.1).
        expert_plan: add ``expert_plan``, ``plan_length`` and ``progress`` to ``info`` on every turn.
        state_facts: add ``state_facts`` (the objects' attributes, ``facts.state_facts``) to ``info`` on every
            turn, and ``goal_facts`` and ``subgoals`` (the planner's) to ``info["gold"]`` (``facts``).
        max_turns: turn limit (ALFWorld: 50).
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "heuristic": HeuristicAgent, "random": RandomAgent}

    public_args = declare(
        AgentEnv.public_args, split=one_of(*SPLITS), difficulty=one_of(*DIFFICULTIES),
        max_receptacles=integer(0, 100, optional=True), closed_prob=number(0, 1, optional=True),
        distractors=list_of(integer(0, 100), max_items=2, optional=True),
        target_instances=list_of(integer(1, 10), max_items=2, optional=True),
        task_types=list_of(one_of(*TASK_TYPES), max_items=len(TASK_TYPES), optional=True),
        num_tasks=integer(1, 1_000_000, optional=True), prompt=one_of(*PROMPTS),
        put_style=one_of(*PUT_STYLES), success_reward=number(-1e6, 1e6), expert_plan=flag(), state_facts=flag(),
    )  # fmt: skip

    def __init__(
        self,
        *,
        split: str = "valid_seen",
        difficulty: str = "default",
        max_receptacles: int | None = None,
        distractors: Sequence[int] | None = None,
        closed_prob: float | None = None,
        target_instances: Sequence[int] | None = None,
        task_types: Sequence[str] | None = None,
        num_tasks: int | None = None,
        prompt: str = "plain",
        put_style: str = "put",
        success_reward: float = 1.0,
        invalid_action_penalty: float = 0.0,
        expert_plan: bool = False,
        state_facts: bool = False,
        max_turns: int = 50,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {PROMPTS}, got {prompt!r}")
        if put_style not in PUT_STYLES:
            raise ValueError(f"put_style must be one of {PUT_STYLES}, got {put_style!r}")
        self.config = make_config(
            difficulty, max_receptacles=max_receptacles, distractors=distractors, closed_prob=closed_prob,
            target_instances=target_instances, task_types=task_types,
        )  # fmt: skip
        self.split = split
        self.num_tasks = int(num_tasks) if num_tasks is not None else SPLIT_SIZES[split]
        if self.num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        self.prompt = prompt
        self.put_style = put_style
        self.success_reward = float(success_reward)
        self.expert_plan = bool(expert_plan)
        self.state_facts = bool(state_facts)
        self.task: Task | None = None
        self.engine: Engine | None = None
        self._plan: tuple[str, ...] = ()
        self._plan0 = 1
        self._plan_memo: dict[bytes, tuple[str, ...]] = {}
        self._keyer: PlanKeyer | None = None
        self._keyer_task: Task | None = None
        self._verl: VerlStep | None = None
        self._verl_task: Task | None = None

    # -- episode ------------------------------------------------------------------------------------------
    def _load(self, index: int) -> Engine:
        """The engine, on task ``index`` (generated once and kept while the same task is played)."""
        task = self.task
        if task is None or task.index != index:
            task = self.task = generate_task(self.split, index, self.config)
        if self.engine is None:
            self.engine = Engine(task, self.put_style)
        elif self.engine.task is not task:
            self.engine.load(task)
        if self.expert_plan and (
            self._keyer is None or self._keyer.eng is not self.engine or self._keyer_task is not task
        ):
            self._keyer, self._keyer_task = PlanKeyer(self.engine), task
            self._plan_memo = {}
        return self.engine

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        eng = self._load(task_index)
        eng.reset()
        assert self.task is not None
        admissible = eng.admissible()
        content = first_message(self.prompt, self.task.intro, admissible, self.put_style)
        info = self._info(admissible)
        info["gold"] = self.task.gold()
        if self.state_facts:
            info["gold"] |= {"goal_facts": facts.goal_facts(self.task), "subgoals": facts.subgoals(self.task)}
            info["state_facts"] = facts.state_facts(eng)
        if self.expert_plan:
            self._plan = ()
            info.update(self._plan_info(None))
            self._plan0 = max(1, len(self._plan))
            info["progress"] = 0.0
        return [{"role": "user", "content": content}], info

    def task_index_of(self, task_id: str) -> int:
        """The index in ``task_id`` (``'<split>:<index>:...'``) if the id is exactly that task's id in this env."""
        parts = task_id.split(":")
        if len(parts) < 3 or parts[0] != self.split or not (parts[1].isascii() and parts[1].isdigit()):
            raise ValueError(f"task_id {task_id!r} is not a task of split {self.split!r} ('{self.split}:<index>:...')")
        index = int(parts[1])
        if index >= self.num_tasks:
            raise ValueError(
                f"task_id {task_id!r} names task {index}, out of range: this env has tasks 0..{self.num_tasks - 1}"
            )
        actual = self.task if self.task is not None and self.task.index == index else None
        if actual is None:
            actual = generate_task(self.split, index, self.config)
        if actual.task_id != task_id:
            raise ValueError(f"unknown task_id {task_id!r}: task {index} of this env is {actual.task_id!r}")
        return index

    def anchor(self) -> str:
        assert self.engine is not None
        return self.engine.anchor()

    def _step(self, action: str) -> StepResult:
        eng = self.engine
        assert eng is not None and self.task is not None
        if self.prompt == "plain" and "<" not in action:
            command, error = action, None
        else:
            command, error = self._command(action)
        if command is None:
            feedback, valid = NOTHING + f" ({error})", False
        else:
            feedback, valid = eng.step(command)
            if not valid:
                error = f"{command[:100]!r} is not a valid command here; choose one of the admissible commands."
        won = eng.won
        admissible = eng.admissible()
        content = feedback if self.prompt == "plain" else self._verl_message(feedback, admissible)
        info = self._info(admissible)
        if self.state_facts:
            info["state_facts"] = facts.state_facts(eng)
        if self.expert_plan:
            info.update(self._plan_info(" ".join(command.lower().split()) if valid and command else None))
        return StepResult([{"role": "user", "content": content}], {"outcome": self.success_reward} if won else {},
                          won, valid, None if valid else error, won, info)  # fmt: skip

    def _verl_message(self, feedback: str, admissible: list[str]) -> str:
        """verl prompt for this turn (the rendered admissible list is cached by the engine)."""
        assert self.engine is not None and self.task is not None
        if self._verl is None or self._verl_task is not self.task:
            self._verl, self._verl_task = VerlStep(self.task.description), self.task
        return self._verl(feedback, self.engine.admissible_text(render_admissible), self.turn)

    def _command(self, action: str) -> tuple[str | None, str | None]:
        """The command inside the agent's turn (``<action>`` tags with the ``verl`` prompt)."""
        low = action.lower()
        if low.count("<action>") == 1 and low.count("</action>") == 1:
            # Fast path for the common well-formed turn; the same result as parse_tag_action below.
            i, j = low.find("<action>"), low.find("</action>")
            content = action[i + 8 : j].strip() if i < j else ""
            if content and not is_blank(content):
                return content, None
        if self.prompt == "verl" or "<action>" in low:
            try:
                return parse_tag_action(
                    action, ("action",), truncated_at=self.truncated_at, require_visible=True
                ).content, None
            except ParseError as e:
                if self.prompt == "verl" or isinstance(e, TruncatedActionError):
                    return None, str(e)
        return action, None

    def _info(self, admissible: list[str]) -> dict[str, Any]:
        eng = self.engine
        assert eng is not None and self.task is not None
        return {"task_id": self.task.task_id, "task_type": self.task.task_type, "won": eng.won,
                "admissible_commands": list(admissible)}  # fmt: skip

    def _plan_info(self, executed: str | None) -> dict[str, Any]:
        """Expert plan from the current state: the rest of the previous plan if the agent followed it."""
        eng = self.engine
        assert eng is not None
        assert self._keyer is not None
        key = self._keyer.key()
        plan = self._plan
        if executed is not None and plan and executed == plan[0]:
            plan = plan[1:]
        else:
            # The memo holds only plans computed from scratch, so a plan is a function of the state and of the
            # previous plan alone (the history of the env object does not matter, which snapshots rely on).
            cached = self._plan_memo.get(key)
            if cached is None:
                if len(self._plan_memo) >= _PLAN_MEMO_LIMIT:
                    self._plan_memo.clear()
                cached = self._plan_memo[key] = tuple(expert_plan(eng))
            plan = cached
        self._plan = plan
        return {"expert_plan": list(plan), "plan_length": len(plan), "progress": 1.0 - len(plan) / self._plan0}

    # -- branching ----------------------------------------------------------------------------------------
    def _snapshot_state(self) -> tuple[Any, ...]:
        assert self.engine is not None
        return self.engine.snapshot(), self._plan, self._plan0

    def _restore_state(self, state: tuple[Any, ...]) -> None:
        assert self._task_index is not None
        engine_state, self._plan, self._plan0 = state
        self._load(self._task_index).restore(engine_state)
