"""Fixtures for the teaching engine's tests, run with the vLLM venv's pytest (torch lives only there):

    .kit/vllm/bin/python -m pytest tests/labs/engine/needs_torch --confcutdir=tests/labs/engine/needs_torch -q

The main suite's conftest (light venv) is deliberately not loaded here, nor this folder there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from labs.engine.model import SmolLM2
from serve.config.model import MODEL_DIR

ROOT = Path(__file__).resolve().parents[4]
TEST_THREADS = 1  # these tests share two cores with everything else; one thread avoids OpenMP stalls
torch.set_num_threads(TEST_THREADS)


@pytest.fixture(scope="session")
def model() -> SmolLM2:
    return SmolLM2(MODEL_DIR, torch.float32)


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(MODEL_DIR)
