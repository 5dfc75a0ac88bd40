"""``TrainConfig.trainable_layers``: only the top N decoder layers and the final norm train; the rest (embeddings, a
tied LM head, the lower layers) is frozen, left out of the optimizer, and survives a checkpoint/resume round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings, strategies as st

from agentgym.baselines.checkpoint import load_checkpoint, save_checkpoint
from agentgym.baselines.config import load_config
from agentgym.baselines.trainer import setup, train, train_iteration
from agentgym.baselines.update import freeze_lower_layers
from agentgym.baselines.warmup import sft_step
from agentgym.tools.tiny_model import build_tiny_model, save_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def chain_config(tmp_path: Path, **overrides: Any) -> Any:
    """The ``learn`` preset, cut down: Chain H=2, 2 tasks x 2 episodes, 2 SFT steps, no evaluation."""
    data = {"batch_tasks": 2, "group_size": 2, "minibatch_size": 4, "sft_steps": 0, "sft_batch": 2,
            "eval_every": 0, "iterations": 2, "plot": False, "progress": False, "out_dir": str(tmp_path / "run"),
            **overrides}  # fmt: skip
    return load_config("learn", overrides=data)


def snapshot(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def expected_trainable(num_layers: int, n: int) -> set[str]:
    top = {f"model.layers.{i}." for i in range(num_layers - n, num_layers)}
    model, _ = build_tiny_model(0, num_layers=num_layers)
    return {k for k, _ in model.named_parameters() if k == "model.norm.weight" or any(k.startswith(t) for t in top)}


def test_optimizer_holds_only_the_trainable_parameters(tmp_path: Path) -> None:
    state = setup(chain_config(tmp_path, trainable_layers=1))
    trainable = {id(p) for p in state.model.parameters() if p.requires_grad}
    names = {k for k, p in state.model.named_parameters() if p.requires_grad}
    assert names == expected_trainable(2, 1)
    held = [p for g in state.optimizer.param_groups for p in g["params"]]
    assert {id(p) for p in held} == trainable and len(held) == len(trainable)
    state.close()


def test_frozen_parameters_do_not_move_trainable_ones_do(tmp_path: Path) -> None:
    config = chain_config(tmp_path, trainable_layers=1)
    state = setup(config)
    frozen = {k for k, p in state.model.named_parameters() if not p.requires_grad}
    before = snapshot(state.model)
    sft_step(state, config, 0, 0)  # a supervised step: a non-zero gradient on every trainable parameter
    train_iteration(state, config, 1)
    after = snapshot(state.model)
    for k in frozen:
        assert torch.equal(before[k], after[k]), k
    moved = {k for k in expected_trainable(2, 1) if not torch.equal(before[k], after[k])}
    assert moved == expected_trainable(2, 1)
    assert set(state.optimizer.state) <= {p for p in state.model.parameters() if p.requires_grad}
    state.close()


def test_the_whole_model_trains_without_the_knob(tmp_path: Path) -> None:
    state = setup(chain_config(tmp_path))
    assert all(p.requires_grad for p in state.model.parameters())
    assert sum(len(g["params"]) for g in state.optimizer.param_groups) == len(list(state.model.parameters()))
    state.close()


def test_a_tied_lm_head_stays_frozen_with_the_embeddings(tmp_path: Path) -> None:
    path = save_tiny_model(tmp_path / "tied", seed=0, tie_word_embeddings=True)
    config = chain_config(tmp_path, model=str(path), trainable_layers=1)
    state = setup(config)
    head, embed = state.model.get_output_embeddings().weight, state.model.get_input_embeddings().weight
    assert head is embed and not head.requires_grad
    before = embed.detach().clone()
    sft_step(state, config, 0, 0)
    assert torch.equal(before, embed.detach())
    state.close()


def test_checkpoint_round_trip_keeps_the_frozen_split(tmp_path: Path) -> None:
    config = chain_config(tmp_path, trainable_layers=1)
    state = setup(config)
    sft_step(state, config, 0, 0)
    save_checkpoint(state, config, tmp_path / "ckpt.pt")
    fresh = setup(config)
    load_checkpoint(fresh, tmp_path / "ckpt.pt")
    assert [p.requires_grad for p in fresh.model.parameters()] == [p.requires_grad for p in state.model.parameters()]
    for (k, a), b in zip(state.model.state_dict().items(), fresh.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    assert len(fresh.optimizer.state) == len(state.optimizer.state) > 0
    state.close()
    fresh.close()


@pytest.mark.slow
def test_resumed_run_equals_the_uninterrupted_one(tmp_path: Path) -> None:
    whole = train(chain_config(tmp_path, trainable_layers=1, sft_steps=2, out_dir=str(tmp_path / "a")))
    train(chain_config(tmp_path, trainable_layers=1, sft_steps=2, iterations=1, out_dir=str(tmp_path / "b")))
    resumed = train(chain_config(tmp_path, trainable_layers=1, sft_steps=2, resume=True, out_dir=str(tmp_path / "b")))
    a, b = whole["state"].model.state_dict(), resumed["state"].model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not any(p.requires_grad for k, p in resumed["state"].model.named_parameters() if "layers.0." in k)


@pytest.mark.parametrize("bad", [-1, 3])
def test_bad_values_are_clear_errors(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ValueError, match="trainable_layers"):
        setup(chain_config(tmp_path, trainable_layers=bad))


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(num_layers=st.integers(1, 4), data=st.data(), tied=st.booleans())
def test_trainable_set_is_the_top_layers_and_the_norm(num_layers: int, data: st.DataObject, tied: bool) -> None:
    n = data.draw(st.integers(0, num_layers))
    model, _ = build_tiny_model(0, num_layers=num_layers, tie_word_embeddings=tied)
    names = freeze_lower_layers(model, n)
    assert set(names) == expected_trainable(num_layers, n)
    assert {k for k, p in model.named_parameters() if p.requires_grad} == set(names)
    assert not model.get_output_embeddings().weight.requires_grad
