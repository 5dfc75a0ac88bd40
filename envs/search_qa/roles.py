"""SearchQARoles-v0: M-ASK's two roles, a Search Behaviour Agent and a Knowledge Management Agent, in one model.

The episode alternates between two roles played by the same policy, each turn tagged with its role
(``info["role"]``: the role that took the turn; ``info["next_role"]``: the role that acts next):

- the **Search Behaviour Agent** (SBA) searches with ``<search> query </search>`` or ends the episode with
  ``<answer> ... </answer>``, as in SearchQA-v0;
- after each search the **Knowledge Management Agent** (KMA) gets the raw passages and its current notes, and
  rewrites the notes inside ``<notes> ... </notes>``: it aggregates, filters and keeps a compact context. The SBA's
  next message shows the notes, not the passages.

Turn rewards (components): the SBA's search turn earns ``recall_coef`` times the supporting-recall delta it caused
(component ``recall``); the KMA's turn earns ``notes_coef * kma_reward(notes, evidence seen)`` (component ``notes``);
the answer earns the usual ``outcome``. ``roles="single"`` is SearchQA-v0 itself (same observations, rewards and
info for the same actions and seed).

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/SearchQARoles-v0", dataset="tiny")
>>> obs, info = env.reset(seed=3)
>>> info["next_role"]
'sba'
>>> obs, r, *_, info = env.step("<search> " + info["gold"]["oracle_queries"][0] + " </search>")
>>> info["role"], info["next_role"], r  # both supporting documents came back: recall 0 -> 1
('sba', 'kma', 1.0)
>>> notes = "Trarhak Tunmamsik directed Beyond Faralder and was born in Bilgertiv."
>>> obs, r, *_, info = env.step(f"<notes> {notes} </notes>")
>>> info["role"], info["next_role"], r  # keeps both hops' evidence, 10 words: 1 - 0.01 * 10
('kma', 'sba', 0.9)
>>> obs[0]["content"].count("<information>")  # the SBA sees the notes, not the passages
0
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentgym.contract.agent import Agent
from agentgym.contract.env import StepResult
from agentgym.contract.parsing import ParseError, parse_tag_action
from agentgym.contract.trust import declare, number, one_of
from agentgym.envs.search_qa.agents import OracleAgent, RandomAgent
from agentgym.envs.search_qa.env import SearchQAEnv
from agentgym.grading.answers import normalize_answer
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

ROLES = ("single", "two")
#: Turns of an episode when ``max_turns`` is not given: SearchQA-v0's 6 (5 searches and an answer); with two roles,
#: a notes turn after each of the 5 searches.
DEFAULT_TURNS = {"single": 6, "two": 11}

SBA_PROMPT = (
    "You are the Search Behaviour Agent of a two-agent team answering a question. When you are missing knowledge, "
    "query the search engine with <search> query </search>. The Knowledge Management Agent reads the results and "
    "gives you its notes between <notes> and </notes>. Once you know the answer, give it inside <answer> and "
    "</answer>, with no explanation, for example <answer> Beijing </answer>. Question: {question}\n"
)
KMA_TURN = (
    "\n\nKnowledge Management Agent: the search returned\n<information>{passages}</information>\n"
    "Your notes so far: <notes> {notes} </notes>\nRewrite the notes for the question: keep every fact that helps "
    "answer it and drop the rest. Reply with the new notes between <notes> and </notes>.\n\n"
)
SBA_TURN = (
    "\n\nSearch Behaviour Agent: the notes so far are <notes> {notes} </notes>\n"
    "Search again with <search> query </search> or answer with <answer> answer </answer>.\n\n"
)
INVALID_NOTES = "\nThe notes are invalid: {reason} The previous notes are kept.\n"


def keeps(notes: str, evidence: str) -> bool:
    """Whether ``notes`` contain the evidence string (SQuAD-normalised, whole words).

    >>> keeps("Directed by Trarhak Tunmamsik.", "trarhak tunmamsik"), keeps("Directed by Trarhak.", "Trarhak Tunmamsik")
    (True, False)
    """
    want = normalize_answer(evidence)
    return not want or f" {want} " in f" {normalize_answer(notes)} "


def kma_reward(notes: str, evidence: Sequence[str], notes_lambda: float = 0.01) -> float:
    """The KMA's turn reward: ``1[notes keep every evidence string] * max(0, 1 - notes_lambda * words(notes))``.

    Notes that drop an evidence string earn exactly 0; notes that keep all of it earn 1 minus the length penalty,
    never below 0 (so keeping is never worse than dropping). With no evidence seen yet the indicator is 1.

    >>> kma_reward("Trarhak Tunmamsik directed it.", ["Trarhak Tunmamsik"], notes_lambda=0.1)
    0.6
    >>> kma_reward("Someone directed it.", ["Trarhak Tunmamsik"], notes_lambda=0.1)
    0.0
    """
    if not all(keeps(notes, e) for e in evidence):
        return 0.0
    return max(0.0, 1.0 - notes_lambda * len(notes.split()))


class SearchQARolesEnv(SearchQAEnv):
    """SearchQA-v0 with M-ASK's two roles (see the module docstring).

    Args (besides SearchQA-v0's):
        roles: ``"two"`` (SBA and KMA turns) or ``"single"`` (SearchQA-v0 exactly).
        notes_lambda: the KMA's length penalty per word of its notes.
        recall_coef: weight of the SBA's supporting-recall delta (0: no SBA turn reward).
        notes_coef: weight of the KMA's reward (0: no KMA turn reward).
        max_turns: turns of both roles together (None: 6 with one role, 11 with two).
    """

    agents: ClassVar[Mapping[str, Any]] = {}  # set below: the role agents
    public_args = declare(SearchQAEnv.public_args, roles=one_of(*ROLES), notes_lambda=number(0.0, 1.0),
                          recall_coef=number(-100.0, 100.0), notes_coef=number(-100.0, 100.0))  # fmt: skip

    def __init__(
        self,
        *,
        roles: str = "two",
        notes_lambda: float = 0.01,
        recall_coef: float = 1.0,
        notes_coef: float = 1.0,
        max_turns: int | None = None,
        **kwargs: Any,
    ):
        if roles not in ROLES:
            raise ValueError(f"roles must be one of {ROLES}, got {roles!r}")
        if notes_lambda < 0:
            raise ValueError(f"notes_lambda must be >= 0, got {notes_lambda}")
        super().__init__(max_turns=DEFAULT_TURNS[roles] if max_turns is None else max_turns, **kwargs)
        self.roles = roles
        self.notes_lambda = float(notes_lambda)
        self.recall_coef = float(recall_coef)
        self.notes_coef = float(notes_coef)
        self._role = "sba"
        self._notes = ""
        self._shown: list[str] = []  # the passage blocks shown to the KMA this episode

    @property
    def two_roles(self) -> bool:
        return self.roles == "two"

    # -- episode ------------------------------------------------------------------------------------
    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        obs, info = super()._reset(task_index, options)
        self._role, self._notes, self._shown = "sba", "", []
        if not self.two_roles:
            return obs, info
        assert self.example is not None
        return [{"role": "user", "content": SBA_PROMPT.format(question=self.question)}], {
            **info, "next_role": "sba"}  # fmt: skip

    def _step(self, action: str) -> StepResult:
        if not self.two_roles:
            return super()._step(action)
        return self._kma_step(action) if self._role == "kma" else self._sba_step(action)

    def _sba_step(self, action: str) -> StepResult:
        before = self._recall()
        result = super()._step(action)
        tags = {"role": "sba", "next_role": "sba"}
        if result.action_valid and not result.terminated:  # a search: its passages go to the KMA
            content = result.observation[0]["content"]
            passages = content.split("<information>", 1)[1].rsplit("</information>", 1)[0]
            self._shown.append(passages)
            self._role, tags["next_role"] = "kma", "kma"
            kma = KMA_TURN.format(passages=passages, notes=self._notes or "(none)")
            result.observation = [{"role": "user", "content": kma}]
            result.reward_components = {"recall": self.recall_coef * (self._recall() - before)}
        result.info = {**result.info, **tags}
        return result

    def _kma_step(self, action: str) -> StepResult:
        self._role = "sba"  # the turn passes to the SBA whatever the KMA wrote
        tags = {"role": "kma", "next_role": "sba"}
        try:
            parsed = parse_tag_action(action, ("notes",), mode=self.parse_mode, truncated_at=self.truncated_at,  # type: ignore[arg-type]
                                      require_visible=True)  # fmt: skip
        except ParseError as e:
            message = INVALID_NOTES.format(reason=str(e)) + SBA_TURN.format(notes=self._notes)
            return StepResult(observation=[{"role": "user", "content": message}], action_valid=False,
                              parse_error=str(e), info={**self._info(), **tags})  # fmt: skip
        self._notes = parsed.content
        reward = self.notes_coef * kma_reward(self._notes, self.evidence_seen(), self.notes_lambda)
        return StepResult(observation=[{"role": "user", "content": SBA_TURN.format(notes=self._notes)}],
                          reward_components={"notes": reward}, info={**self._info(), **tags})  # fmt: skip

    def evidence_seen(self) -> list[str]:
        """The gold evidence strings the passages shown so far hold: what hop ``k``'s supporting document states
        (``hop_answers[k]``) for each supporting document retrieved; for loaded benchmark files (no hop answers),
        the golden answers that occur in a passage shown."""
        assert self.example is not None
        ex = self.example
        if ex.hop_answers:
            return [a for doc, a in zip(ex.supporting_doc_ids, ex.hop_answers, strict=False) if doc in self._retrieved]
        return [a for a in ex.golden_answers if any(keeps(p, a) for p in self._shown)]

    def anchor(self) -> str:
        base = super().anchor()
        if not self.two_roles:
            return base
        return f"{base}:{self._role}:{hashlib.sha1(self._notes.encode()).hexdigest()[:12]}"

    # -- branching ----------------------------------------------------------------------------------
    def _snapshot_state(self) -> tuple[Any, ...]:
        return (super()._snapshot_state(), self._role, self._notes, tuple(self._shown))

    def _restore_state(self, state: tuple[Any, ...]) -> None:
        base, self._role, self._notes, shown = state
        super()._restore_state(base)
        self._shown = list(shown)


# -- agents -----------------------------------------------------------------------------------------
class RoleOracleAgent(Agent):
    """Privileged upper bound (and demonstration agent): the SBA searches each hop's oracle query, then answers the
    gold answer; the KMA adds to its notes the first new sentence that states each gold evidence string they lack.
    With one role it is SearchQA-v0's oracle."""

    name = "oracle"
    privileged = True

    def __init__(self) -> None:
        super().__init__()
        self._searches = 0
        self._notes: list[str] = []
        self._single = OracleAgent()

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._searches, self._notes = 0, []

    def act(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        gold = info["gold"]
        if "next_role" not in info:  # one role: SearchQA-v0's oracle
            return self._single.act(messages, info)
        if info["next_role"] == "kma":
            evidence = gold.get("hop_answers") or gold["answers"]
            sentences = _sentences(_latest_passages(messages))
            for e in evidence:  # the first sentence stating each evidence string the notes lack
                if not keeps(" ".join(self._notes), e):
                    self._notes += [s for s in sentences if keeps(s, e)][:1]
            return f"<notes> {' '.join(self._notes) or 'nothing useful yet'} </notes>"
        queries = gold.get("oracle_queries") or []
        if self._searches < len(queries):
            self._searches += 1
            return f"<search> {queries[self._searches - 1]} </search>"
        return f"<answer> {gold['answers'][0]} </answer>"


class RoleRandomAgent(Agent):
    """SearchQA-v0's random agent as the SBA; as the KMA, notes of a random subset of the new passages' sentences
    (one time in ten a malformed action)."""

    name = "random"

    def __init__(self) -> None:
        super().__init__()
        self._sba = RandomAgent()

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._sba.reset(seed=None if seed is None else seed + 1)

    def act(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        if info.get("next_role") != "kma":
            return self._sba.act(messages, info)
        if self.np_random.random() < 0.1:
            return "my notes are <notes"
        sentences = _sentences(_latest_passages(messages))
        kept = [s for s in sentences if self.np_random.random() < 0.5] or ["nothing"]
        return f"<notes> {' '.join(kept)} </notes>"


def _latest_passages(messages: list[dict[str, Any]]) -> str:
    """The passages of the last KMA message (empty when there is none)."""
    for m in reversed(messages):
        if m.get("role") != "assistant" and "<information>" in str(m.get("content", "")):
            return str(m["content"]).split("<information>", 1)[1].split("</information>", 1)[0]
    return ""


def _sentences(passages: str) -> list[str]:
    """The sentences of a passage block (its ``Doc i(Title: t)`` prefixes dropped)."""
    out = []
    for line in passages.splitlines():
        text = line.split(") ", 1)[1] if line.startswith("Doc ") and ") " in line else line
        out += [s.strip() + "." for s in text.split(".") if s.strip()]
    return out


SearchQARolesEnv.agents = {"oracle": RoleOracleAgent, "random": RoleRandomAgent}
SearchQARolesEnv.demo_agent = RoleOracleAgent  # type: ignore[assignment]  # SearchQA-v0's is a DemoAgent

__all__ = ["METHODS", "RoleOracleAgent", "RoleRandomAgent", "SearchQARolesEnv", "keeps", "kma_reward"]

METHODS: tuple[Method, ...] = (
    Method("m_ask", "M-ASK", "wrapper",
           "two roles in one model over SearchQA: a search agent and a knowledge manager whose notes replace the "
           "passages, each with its own turn reward",
           needs=("outcome", "reference"), paper=cite("M-ASK"), code="agentgym.envs.search_qa.roles:kma_reward",
           choices=("the env agentgym/SearchQARoles-v0 (roles='two'): after each search the KMA turn rewrites the "
                    "notes inside <notes>...</notes>; the SBA's next message shows the notes, not the passages "
                    "(the trainer's rollout is one token sequence, so the passages stay earlier in its context)",
                    "SBA reward: recall_coef = 1 x the supporting-recall delta of its search (component recall)",
                    "KMA reward: notes_coef = 1 x 1[notes keep every gold evidence string seen] x max(0, 1 - "
                    "notes_lambda x words), notes_lambda = 0.01; evidence: the hop answer each retrieved "
                    "supporting document states (benchmark files: the golden answers a shown passage holds)",
                    "an invalid notes turn keeps the old notes, earns 0 (plus the format penalty) and passes the turn "
                    "to the SBA",
                    "knobs are env arguments: --set 'env_kwargs={\"dataset\": \"tiny\", \"notes_lambda\": 0.05}'; "
                    "the trainer's max_turns (default 3: one search, its notes, the answer) caps the episode: "
                    "--set max_turns=11 gives the env's whole budget"),
           train={"env_id": "agentgym/SearchQARoles-v0", "env_kwargs": {"dataset": "tiny"}, "algo": "grpo",
                  "estimator": "gtpo", "stop": ["</search>", "</answer>", "</notes>"]},
           knobs_into="config"),
)  # fmt: skip
