"""A learner's own models, as STAND-INS written by the tests: no other real weights and no model hub are reachable
from these machines (issue 53).

- `ollama_store`: an Ollama model store laid out as Ollama 0.12 writes it (manifests/registry.ollama.ai/library/
  <name>/<tag>, blobs/sha256-<hex>), holding the bundled SmolLM2 GGUF as the model layer, named by its digest, with a
  template layer (Go template syntax, as Ollama's) and a params layer.
- `tiny_model`: a random-weight StableLM folder written with transformers in the vLLM venv, with the bundled model's
  tokenizer. StableLM, not Qwen2: transformers 5 gives a Qwen2 folder its own Qwen2 pre-tokenizer, whose hash over
  a borrowed vocabulary llama.cpp's converter does not know (a real Qwen2 folder converts); a StableLM folder keeps
  the tokenizer as written, which the converter recognises (SmolLM's), and transformers reads its GGUF back.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from serve.config.model import MODEL_DIR
from serve.install.vllm_venv import VENV

OLLAMA_TEMPLATE = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""  # Ollama's own smollm2 template: Go template syntax, not Jinja
OLLAMA_PARAMS = {"stop": ["<|im_start|>", "<|im_end|>"]}
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def blob(store: Path, data: bytes | None = None, source: Path | None = None) -> dict[str, object]:
    """Write a blob named by its sha256 (from bytes, or a copy of a file); its manifest entry's digest and size."""
    digest = hashlib.sha256(data if data is not None else (source or Path()).read_bytes()).hexdigest()
    path = store / "blobs" / f"sha256-{digest}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if data is not None:
        path.write_bytes(data)
    else:
        shutil.copyfile(source or Path(), path)
    return {"digest": f"sha256:{digest}", "size": path.stat().st_size}


def ollama_store(store: Path, gguf: Path, name: str = "smollm2", tag: str = "135m") -> Path:
    """An Ollama store holding `gguf` as `name:tag`; its manifest's path."""
    config = json.dumps({"model_format": "gguf", "model_family": "llama", "file_type": "Q4_1"}).encode()
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", **blob(store, source=gguf)},
        {"mediaType": "application/vnd.ollama.image.template", **blob(store, OLLAMA_TEMPLATE.encode())},
        {"mediaType": "application/vnd.ollama.image.params", **blob(store, json.dumps(OLLAMA_PARAMS).encode())},
    ]
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **blob(store, config)},
        "layers": layers,
    }
    path = store / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


TINY_MODEL = """
import sys, torch
from transformers import AutoTokenizer, StableLmConfig, StableLmForCausalLM
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
config = StableLmConfig(
    vocab_size=len(tokenizer), hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
    eos_token_id=tokenizer.eos_token_id,
)
torch.manual_seed(0)
StableLmForCausalLM(config).save_pretrained(sys.argv[2])
tokenizer.save_pretrained(sys.argv[2])
"""


def tiny_model(folder: Path) -> Path:
    """A random-weight 2-layer StableLM in `folder` (head_dim 64, a size vLLM's CPU attention takes), with the bundled
    model's tokenizer and chat template (a ChatML one)."""
    subprocess.run([str(VENV.python), "-c", TINY_MODEL, str(MODEL_DIR), str(folder)], check=True, capture_output=True)
    return folder
