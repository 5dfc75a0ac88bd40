"""SearchQA-v0: search-augmented question answering with the Search-R1 protocol.

Each episode is one question. The agent searches with ``<search> query </search>`` and gets the top-k
passages back as ``<information>Doc 1(Title: ...) ...</information>``; it ends the episode with
``<answer> ... </answer>``, scored by exact match (or F1 / substring EM) against the golden answers.
By default the questions and corpus come from a seeded synthetic knowledge base of invented entities
(so no model can answer from memory); ``questions_path``/``corpus_path`` run real FlashRAG / Search-R1
files instead (NQ, HotpotQA, ...).

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
>>> obs, info = env.reset(seed=3)
>>> obs, r, terminated, truncated, info = env.step("<search>" + info["gold"]["oracle_queries"][0] + "</search>")
>>> obs[0]["content"].lstrip().startswith("<information>")
True
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import MODES, ParseError, parse_tag_action
from agentgym.contract.trust import declare, integer, list_of, one_of
from agentgym.envs.search_qa.agents import DemoAgent, HeuristicAgent, OracleAgent, RandomAgent
from agentgym.envs.search_qa.data import HOP_TYPES, QADataset, QAExample, build_dataset
from agentgym.grading.answers import exact_match, f1_score, sub_exact_match
from agentgym.tools.retrieval import Retriever, make_retriever
from agentgym.tools.retrieval.base import Hit

ACTION_TAGS = ("search", "answer")
REWARD_METRICS = ("em", "f1", "subem")

PROMPT = (
    "Answer the question below. Think step by step inside <think> and </think> whenever you receive new "
    "information. When you are missing knowledge, query the search engine with <search> query </search>; the "
    "top results come back between <information> and </information>. You may search as often as you need. "
    "Once you know the answer, give it inside <answer> and </answer>, with no explanation, for example "
    "<answer> Beijing </answer>. Question: {question}\n"
)

INVALID_ACTION = (
    "\nMy previous action is invalid: {reason} To search, I should put the query between <search> and "
    "</search>. To give the final answer, I should put it between <answer> and </answer>. Let me try again.\n"
)


def _is_disk_spec(spec: str) -> bool:
    kind, _, arg = spec.partition(":")
    return kind.strip().lower() == "bm25" and arg.strip().lower() == "disk"


def format_passages(hits: list[Hit]) -> str:
    """Search-R1 passage block: one ``Doc i(Title: t) text`` line per hit."""
    return "".join(f"Doc {i}(Title: {h.doc.title}) {h.doc.text}\n" for i, h in enumerate(hits, 1))


@functools.lru_cache(maxsize=4)
def shared_dataset(preset: str, seed: int) -> QADataset:
    """A preset dataset, built once and shared (read-only) by every env that asks for it: building ``small`` takes
    seconds and megabytes, so an env server's sessions must not each build their own."""
    return build_dataset(preset, seed=seed)


class SearchQAEnv(AgentEnv):
    """Search-augmented QA over a corpus (see the module docstring).

    Args:
        dataset: a ``QADataset`` or the name of a synthetic preset (``"tiny"``, ``"small"``, ``"100k"``).
        data_seed: seed of the synthetic knowledge base (the episode seed only picks the question).
        split: ``"train"`` or ``"test"``.
        max_questions: keep only the split's first N questions (small fixed task sets for quick experiments).
        hop_types: keep only these question types (``"1hop"``, ``"bridge"``, ``"comparison"``, ``"multihop"``),
            applied before ``max_questions``.
        retriever: a ``Retriever`` or a spec for ``make_retriever`` (``"bm25"``, ``"dense"``, ``"hybrid"``,
            ``"bm25:rank_bm25"``, ``"bm25:disk"``, ``"remote:http://127.0.0.1:8000"``).
        topk: passages returned per search (Search-R1 uses 3).
        max_turns: agent turns before the episode is truncated (searches plus the answer); 6 lets a
            4-hop question be solved with one search per hop.
        reward_metric: ``"em"``, ``"f1"`` or ``"subem"``: the outcome reward given for the answer.
        invalid_action_penalty: subtracted (as reward component ``format``) for each unparsable action.
        parse_mode: ``"lenient"`` (Search-R1's first complete tag pair) or ``"strict"``.
        questions_path, corpus_path: FlashRAG question JSONL and ``{"id","contents"}`` corpus to use
            instead of the synthetic data. With a remote retriever ``corpus_path`` may be left out (supporting
            ids are then not checked); with ``retriever="bm25:disk"`` the corpus is never read into memory (a
            ``CorpusFile``; the index and offsets persist under ``cache_dir``), for corpora such as wiki-18.
        cache_dir: where retriever indexes persist (keyed by a corpus hash).

    Reset option ``wording``: ``"original"`` or ``"reworded"`` (the same question in other words, with the same
    answers: other templates, a comparison's two entities in the other order; synthetic data only). With it,
    ``info["pair_id"]`` is the question's id, so the two wordings' groups pair up (Co-Reward).
    """

    reset_options: ClassVar[tuple[str, ...]] = ("wording",)

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "heuristic": HeuristicAgent, "random": RandomAgent}
    demo_agent = DemoAgent

    #: From outside: the cheap dataset presets only (``100k``, ``data_seed``, other retrievers and the file
    #: arguments are the operator's).
    public_args = declare(AgentEnv.public_args, dataset=one_of("tiny", "small"), split=one_of("train", "test"),
                   max_questions=integer(1, 1_000_000, optional=True), topk=integer(1, 20),
                   hop_types=list_of(one_of(*HOP_TYPES), max_items=len(HOP_TYPES), optional=True),
                   reward_metric=one_of(*REWARD_METRICS), parse_mode=one_of(*MODES))  # fmt: skip

    def __init__(
        self,
        *,
        dataset: QADataset | str = "small",
        data_seed: int = 0,
        split: str = "test",
        max_questions: int | None = None,
        hop_types: Sequence[str] | None = None,
        retriever: Retriever | str = "bm25",
        topk: int = 3,
        max_turns: int = 6,
        reward_metric: str = "em",
        invalid_action_penalty: float = 0.0,
        parse_mode: str = "lenient",
        questions_path: str | None = None,
        corpus_path: str | None = None,
        cache_dir: str | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if reward_metric not in REWARD_METRICS:
            raise ValueError(f"reward_metric must be one of {REWARD_METRICS}, got {reward_metric!r}")
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        disk = isinstance(retriever, str) and _is_disk_spec(retriever)
        if questions_path is not None or corpus_path is not None:
            remote = not isinstance(retriever, str) or retriever.strip().lower().startswith("remote:")
            if questions_path is None or (corpus_path is None and not remote):
                raise ValueError(
                    "questions_path and corpus_path must be given together (with a remote retriever, "
                    "retriever='remote:URL' or a Retriever, corpus_path may be left out)"
                )
            from agentgym.envs.search_qa.flashrag import load_flashrag

            corpus_dir = None
            if disk and corpus_path is not None and cache_dir is not None and Path(corpus_path).is_file():
                from agentgym.tools.retrieval import disk_index_dirs

                corpus_dir = disk_index_dirs(corpus_path, cache_dir)[1]
            dataset = load_flashrag(questions_path, corpus_path, split=split, stream=disk, corpus_index_dir=corpus_dir)
        elif isinstance(dataset, str):
            dataset = shared_dataset(dataset, data_seed)
        self.dataset = dataset
        self._owns_corpus = questions_path is not None and hasattr(dataset.corpus, "close")
        self.examples: list[QAExample] = dataset.split(split)
        if hop_types is not None:
            unknown = sorted(set(hop_types) - set(HOP_TYPES))
            if unknown:
                raise ValueError(f"unknown hop types {unknown}; known: {list(HOP_TYPES)}")
            self.examples = [e for e in self.examples if e.hop_type in set(hop_types)]
        if max_questions is not None:
            if max_questions < 1:
                raise ValueError(f"max_questions must be >= 1, got {max_questions}")
            self.examples = self.examples[:max_questions]
        if not self.examples:
            raise ValueError(f"split {split!r} has no questions")
        self.num_tasks = len(self.examples)
        self._index = {e.id: i for i, e in enumerate(self.examples)}
        self.retriever = (
            make_retriever(retriever, dataset.corpus, cache_dir=cache_dir) if isinstance(retriever, str) else retriever
        )
        self.topk = topk
        self.reward_metric = reward_metric
        self.parse_mode = parse_mode
        self.example: QAExample | None = None
        self.question = ""  # the episode's question as shown (the example's, or its rewording)
        self._retrieved: list[str] = []
        self._searches = 0

    # -- episode ------------------------------------------------------------------------------------
    def task_index_of(self, task_id: str) -> int:
        if task_id not in self._index:
            raise ValueError(f"unknown task_id {task_id!r} (ids look like {self.examples[0].id!r})")
        return self._index[task_id]

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        self.example = self.examples[task_index]
        self._retrieved = []
        self._searches = 0
        wording = options.get("wording")
        if wording not in (None, "original", "reworded"):
            raise ValueError(f"wording must be 'original' or 'reworded', got {wording!r}")
        if wording == "reworded" and not self.example.rewording:
            raise ValueError(f"question {self.example.id!r} has no second wording (loaded question files have none)")
        self.question = self.example.rewording if wording == "reworded" else self.example.question
        info = self._info() if wording is None else {**self._info(), "pair_id": self.example.id, "wording": wording}
        return [{"role": "user", "content": PROMPT.format(question=self.question)}], info

    def _step(self, action: str) -> StepResult:
        assert self.example is not None
        # A tag left open by the action-length cut is not an action (truncated_at says where the cut was).
        try:
            parsed = parse_tag_action(
                action,
                ACTION_TAGS,
                mode=self.parse_mode,  # type: ignore[arg-type]
                truncated_at=self.truncated_at,
                require_visible=True,
            )
        except ParseError as e:
            return StepResult(
                observation=[{"role": "user", "content": INVALID_ACTION.format(reason=str(e))}],
                action_valid=False,
                parse_error=str(e),
                info=self._info(),
            )
        if parsed.tag == "search":
            hits = self.retriever.search(parsed.content, self.topk)
            self._searches += 1
            new_ids = [h.doc.id for h in hits]
            self._retrieved.extend(i for i in new_ids if i not in self._retrieved)
            content = f"\n\n<information>{format_passages(hits).strip()}</information>\n\n"
            return StepResult(
                observation=[{"role": "user", "content": content}],
                info={**self._info(), "retrieved_doc_ids": new_ids},
            )
        info = {**self._info(), "answer": parsed.content}
        info["metrics"] = self._metrics(parsed.content, info["supporting_recall"])
        return StepResult(
            observation=[],
            reward_components={"outcome": info["metrics"][self.reward_metric]},
            terminated=True,
            success=info["metrics"]["em"] == 1.0,
            info=info,
        )

    def _truncated_info(self) -> dict[str, Any]:
        """An episode that ran out of turns without answering scores 0."""
        return {"metrics": self._metrics(None, self._recall())}

    def _metrics(self, answer: str | None, supporting_recall: float) -> dict[str, float]:
        assert self.example is not None
        golds = list(self.example.golden_answers)
        return {
            "em": exact_match(answer, golds) if answer is not None else 0.0,
            "f1": f1_score(answer, golds) if answer is not None else 0.0,
            "subem": sub_exact_match(answer, golds) if answer is not None else 0.0,
            "supporting_recall": supporting_recall,
            "searches": float(self._searches),
        }

    def anchor(self) -> str:
        # The task plus the set of passages seen: two rollouts that retrieved the same documents are in the same
        # state whatever the order or wording of their queries.
        assert self.example is not None
        key = hashlib.sha1("\x1f".join(sorted(self._retrieved)).encode()).hexdigest()[:16]
        return f"{self.example.id}:{key}"

    def _recall(self) -> float:
        assert self.example is not None
        supporting = set(self.example.supporting_doc_ids)
        return len(supporting.intersection(self._retrieved)) / len(supporting) if supporting else 0.0

    def _info(self) -> dict[str, Any]:
        """Per-step info: the task record and the share of supporting documents seen so far."""
        assert self.example is not None
        recall = self._recall()
        # ``progress``: verifiable progress in [0, 1] for process rewards.
        return {"task_id": self.example.id, "gold": self.example.gold(), "supporting_recall": recall,
                "progress": recall}  # fmt: skip

    def entity_names(self) -> list[str]:
        """The knowledge base's entity names and the short forms its passages use (a synthetic dataset, rebuilt from
        its config and seed), or the corpus's titles (loaded files): the name list a claim extractor matches."""
        data = self.dataset
        if data.config is None or data.seed is None:
            return sorted({d.title for d in data.corpus if d.title})
        import numpy as np

        from agentgym.envs.search_qa.kb import build_kb

        kb = build_kb(data.config, np.random.default_rng(data.seed))  # build_dataset's first draw from the seed
        return sorted({n for e in kb.entities.values() for n in (*e.names, *e.short) if n})

    # -- branching ----------------------------------------------------------------------------------
    def _snapshot_state(self) -> tuple[tuple[str, ...], int]:
        return tuple(self._retrieved), self._searches

    def _restore_state(self, state: tuple[tuple[str, ...], int]) -> None:
        assert self._task_index is not None
        self.example = self.examples[self._task_index]
        retrieved, self._searches = state
        self._retrieved = list(retrieved)

    def close(self) -> None:
        self.retriever.close()
        if self._owns_corpus:
            self.dataset.corpus.close()  # type: ignore[attr-defined]  # the CorpusFile load_flashrag opened
