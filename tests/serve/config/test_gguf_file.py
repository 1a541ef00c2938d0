"""A GGUF's header as the kit reads it before preparing it (serve/config/gguf_file.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from serve.config import gguf_file
from serve.config.gguf_file import LOADABLE_ARCHITECTURES
from serve.config.gguf_file import gguf_file as read_kept
from serve.install.llamacpp_venv import gguf_path
from serve.install.vllm_venv import VENV


def test_the_architectures_vllm_can_be_given_are_the_installed_transformers() -> None:
    """transformers' own list (the vLLM venv's), less its pseudo-architectures."""
    installed = subprocess.run(
        [
            str(VENV.python),
            "-c",
            "import json; from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES as a; "
            "print(json.dumps(a))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert list(LOADABLE_ARCHITECTURES) == [
        name for name in json.loads(installed) if name not in ("general", "tokenizer")
    ]


def test_a_header_is_read_once_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_file, "FACTS_DIR", tmp_path)
    first = read_kept(gguf_path(), "k")
    assert first.architecture == "llama" and first.chat_template and first.size_bytes == gguf_path().stat().st_size
    monkeypatch.setattr(gguf_file, "read", lambda path: pytest.fail("read again"))
    assert read_kept(gguf_path(), "k") == first


def test_a_file_that_is_no_gguf_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_file, "FACTS_DIR", tmp_path / "facts")
    fake = tmp_path / "not.gguf"
    fake.write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="cannot be read as a GGUF"):
        read_kept(fake, "k")
