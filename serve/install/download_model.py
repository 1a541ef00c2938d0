"""Download a hub model's checkpoint with huggingface_hub's own snapshot_download, into a folder of the kit's.

Runs inside the native runtime's venv (huggingface_hub comes with vLLM), as a script:
    .kit/vllm/bin/python serve/install/download_model.py REPO_ID OUT_DIR [--config-only]
huggingface_hub reads HF_ENDPOINT (a mirror) and HF_TOKEN (a gated or private model) from the environment. Only what
vLLM and llama.cpp's converter read is fetched: the config, the safetensors, the tokenizer and the chat template. A hub
that does not answer, or refuses, ends it with one line (the last) saying what to set, and exit status 3.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

WANTED_FILES = ["*.json", "*.safetensors", "*.jinja", "tokenizer.model", "*.txt"]
DONE_MARKER = ".kit-downloaded"  # serve/install/checkpoints.py reads it: the snapshot is whole
REFUSED = 3  # the exit status serve/install/checkpoints.py turns into its one line


def download(repo_id: str, out_dir: Path, config_only: bool = False) -> None:
    """The checkpoint's files into `out_dir`, or its config.json alone (`config_only`: what the preflight sizes)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    try:
        folder = snapshot_download(
            repo_id, local_dir=out_dir, allow_patterns=["config.json"] if config_only else WANTED_FILES
        )
    except GatedRepoError:
        refuse(f"MODEL_NAME={repo_id} is gated on {endpoint}: accept its licence there and set HF_TOKEN")
    except RepositoryNotFoundError:
        refuse(f"MODEL_NAME={repo_id} is not on {endpoint} (or is private: set HF_TOKEN); check the name")
    except (HfHubHTTPError, OSError, Exception) as exc:  # httpx's errors too: every way of not answering
        refuse(
            f"MODEL_NAME={repo_id}: the hub at {endpoint} did not answer ({type(exc).__name__}); set HF_ENDPOINT to a "
            "mirror you reach (and HF_TOKEN if it needs one), or download the model yourself and set MODEL_PATH"
        )
    if not config_only:
        (Path(folder) / DONE_MARKER).write_text(f"{repo_id}\n")  # written last: a download cut short resumes
    print(f"downloaded {repo_id} into {folder}", flush=True)


def refuse(line: str) -> None:
    print(line, flush=True)
    sys.exit(REFUSED)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--config-only"]):
        raise SystemExit("usage: download_model.py REPO_ID OUT_DIR [--config-only]")
    download(sys.argv[1], Path(sys.argv[2]), config_only=sys.argv[3:] == ["--config-only"])
