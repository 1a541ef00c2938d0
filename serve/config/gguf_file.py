"""What the kit reads from a GGUF before preparing it: its architecture, its shape and parameter count for the
sizing and the preflight, and its chat template, with gguf's own reader (llama.cpp's Python package).

Reading a GGUF parses its whole vocabulary (seconds for a large one), so what is read is kept in a small JSON file
under CACHE_DIR/models/facts/, named by the file's path, size and time (serve/config/model_source.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serve.config.paths import CACHE_DIR
from serve.config.sizing import ModelFacts, SizingError
from ui.values import SettingsError

FACTS_DIR = CACHE_DIR / "models" / "facts"
# The GGUF architectures transformers 5.19 (the vLLM venv's) turns into a checkpoint vLLM serves:
# transformers.modeling_gguf_pytorch_utils.GGUF_SUPPORTED_ARCHITECTURES less its pseudo-entries ("general",
# "tokenizer"); tests/serve/config/test_gguf_file.py keeps it equal to the installed one.
LOADABLE_ARCHITECTURES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen2_moe",
    "gpt_oss",
    "lfm2",
    "qwen3",
    "qwen3_moe",
    "falcon",
    "phi3",
    "bloom",
    "t5",
    "stablelm",
    "gpt2",
    "starcoder2",
    "mamba",
    "nemotron",
    "gemma2",
    "gemma3",
    "gemma4",
    "umt5",
    "deci",
    "minimax_m2",
)
PROJECTION_TENSORS = ("attn_q.", "attn_k.", "attn_v.", "attn_output.", "ffn_gate.", "ffn_up.", "ffn_down.")


@dataclass(frozen=True, slots=True)
class GgufFile:
    """A GGUF's header as the kit uses it: the config.json keys the sizing reads, and the tensors' counts."""

    architecture: str
    config: dict[str, int | None]  # num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, ...
    num_params: int
    num_projection_params: int
    chat_template: str | None
    size_bytes: int

    def facts(self, name: str) -> ModelFacts:
        """The sizing's facts, counted from the tensors (exact, as from a safetensors header)."""
        shape = {key: self.config.get(key) for key in ("num_hidden_layers", "num_key_value_heads", "head_dim")}
        missing = [key for key, value in shape.items() if not value]
        if missing:
            raise SizingError(f"{name}'s GGUF lacks {', '.join(missing)} ({self.architecture}.*): it cannot be sized")
        return ModelFacts(
            name,
            int(shape["num_hidden_layers"] or 0),
            int(shape["num_key_value_heads"] or 0),
            int(shape["head_dim"] or 0),
            self.config.get("max_position_embeddings"),
            self.num_params,
            "GGUF tensors",
            self.num_projection_params,
        )

    def refusal(self, setting: str) -> str | None:
        """Why vLLM cannot serve it (transformers cannot turn it into a checkpoint), with what would work."""
        if self.architecture in LOADABLE_ARCHITECTURES:
            return None
        return (
            f"{setting} is a GGUF of architecture {self.architecture!r}, which transformers cannot turn into a "
            f"checkpoint for vLLM (it reads {', '.join(LOADABLE_ARCHITECTURES)}): point MODEL_PATH at the model's "
            "Hugging Face folder instead, or serve the GGUF with llama.cpp alone (ENGINES=llamacpp)"
        )


def read(path: Path) -> GgufFile:
    import gguf

    reader = gguf.GGUFReader(path)

    def field(key: str) -> Any:  # gguf's contents(): a str, a number or a list
        found = reader.fields.get(key)
        return None if found is None else found.contents()

    arch = str(field("general.architecture"))
    heads = field(f"{arch}.attention.head_count")
    width = field(f"{arch}.embedding_length")
    head_dim = field(f"{arch}.attention.key_length")
    config = {
        "num_hidden_layers": field(f"{arch}.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": field(f"{arch}.attention.head_count_kv") or heads,
        "head_dim": head_dim or (int(width) // int(heads) if width and heads else None),
        "max_position_embeddings": field(f"{arch}.context_length"),
    }
    counts = [(tensor.name, int(tensor.n_elements)) for tensor in reader.tensors]
    template = field("tokenizer.chat_template")
    return GgufFile(
        arch,
        {key: int(value) if value is not None else None for key, value in config.items()},
        sum(count for _, count in counts),
        sum(count for name, count in counts if name.split(".", 2)[-1].startswith(PROJECTION_TENSORS)),
        template if isinstance(template, str) else None,
        path.stat().st_size,
    )


def gguf_file(path: Path, key: str) -> GgufFile:
    """The GGUF at `path`, read once per `key` (model_source.file_key) and kept; SettingsError if it is no GGUF."""
    kept = FACTS_DIR / f"{path.stem}-{key}.json"
    if kept.is_file():
        return GgufFile(**json.loads(kept.read_text()))
    try:
        found = read(path)
    except (ValueError, OSError) as exc:
        raise SettingsError(f"MODEL_PATH={path} is invalid: it cannot be read as a GGUF ({exc})") from None
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(f".{key}.tmp")
    partial.write_text(json.dumps(asdict(found)))
    partial.replace(kept)
    return found
