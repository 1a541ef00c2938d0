"""Names that are no setting: one warning each, naming the closest setting, before anything starts.

A misspelt key (`MAX_NUM_SEQ=4`) would otherwise be ignored in silence and the default used. Which names
are checked, and why:
- every key of the settings file (`.env`, or KIT_ENV_FILE): everything written there is meant for the kit;
- of the variables exported in the shell, only those that look like the kit's, since the shell holds many
  that are not (PATH, HOME, OLLAMA_HOST, OMP_PROC_BIND...): a name in vLLM's and the kit's namespace
  (`VLLM_*`), or one that difflib finds close to a setting (NEAR_MISS_CUTOFF) and that starts like it
  (its first COMMON_PREFIX_CHARS characters: `MAX_NUM_SEQ`, `ENGINE`).
Never warned about: the settings (KNOBS), the client's variables, and vLLM's own environment variables
(serve/config/vllm_env_names.txt, from vllm.envs), which the native runtime passes to the engine from the shell
and from `.env`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

from dotenv import dotenv_values

from serve.config.paths import ROOT
from serve.config.settings import CLIENT_VARIABLES, KNOBS

KIT_VARIABLES = ("KIT_ENV_FILE",)  # which settings file (ui.environment.env_file)
VLLM_PREFIX = "VLLM_"
VLLM_NAMES_FILE = Path(__file__).with_name("vllm_env_names.txt")
SUGGEST_CUTOFF = 0.6  # difflib's own default: a key of the settings file gets a suggestion from there up
NEAR_MISS_CUTOFF = 0.8  # a shell variable this close to a setting is probably meant as one
COMMON_PREFIX_CHARS = 3


@cache
def vllm_names() -> frozenset[str]:
    """vLLM's own VLLM_* environment variables (the list committed beside this module)."""
    lines = VLLM_NAMES_FILE.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def setting_names() -> list[str]:
    return [knob.env for knob in KNOBS] + [variable.env for variable in CLIENT_VARIABLES]


def known(name: str) -> bool:
    return name in setting_names() or name in KIT_VARIABLES or name in vllm_names()


def vllm_passthrough(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that are vLLM's own and no setting of the kit: the native engine gets them as set."""
    settings = set(setting_names())
    return {name: value for name, value in env.items() if name in vllm_names() and name not in settings}


def closest(name: str, cutoff: float = SUGGEST_CUTOFF) -> str | None:
    matches = difflib.get_close_matches(name, setting_names(), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def looks_like_the_kits(name: str) -> bool:
    """A shell variable worth a warning when unknown: VLLM_*, or a near miss of a setting that starts like it."""
    if name.startswith(VLLM_PREFIX):
        return True
    near = closest(name, NEAR_MISS_CUTOFF)
    return near is not None and near[:COMMON_PREFIX_CHARS] == name[:COMMON_PREFIX_CHARS]


# Settings an earlier kit had, and what became of them: a .env written then still holds them
RETIRED = {
    "LLAMACPP_BUILD_AHEAD": "llama.cpp comes prebuilt from PyPI (xllamacpp) now, so there is nothing to build ahead",
    "LLAMACPP_INTERRUPT_REQUESTS": (
        "the llama.cpp engines run llama.cpp's own server, which queues as Ollama does; LLAMACPP_NUM_PARALLEL sets how "
        "many requests it decodes together"
    ),
}


def problem(name: str, where: str) -> str:
    """The one line for a name that is no setting: what became of a retired one, else the closest setting, else
    where the settings are listed."""
    if name in RETIRED:
        return f"{name} ({where}) is a retired setting, which the kit ignores: {RETIRED[name]}; delete the line"
    suggestion = closest(name)
    if suggestion is not None:
        return f"{name} ({where}) is not a setting of the kit, which ignores it; did you mean {suggestion}?"
    listed = f" and vLLM's own variables in {VLLM_NAMES_FILE.relative_to(ROOT)}" if name.startswith(VLLM_PREFIX) else ""
    return (
        f"{name} ({where}) is not a setting of the kit, which ignores it; the settings are the keys of "
        f".env.example (serve/config/README.md){listed}"
    )


def unknown_names(file_keys: Iterable[str], shell: Mapping[str, str], file_label: str) -> list[str]:
    """One warning line per unknown key of the settings file and per unknown kit-like shell variable."""
    lines = [problem(key, f"in {file_label}") for key in file_keys if not known(key)]
    lines += [
        problem(name, "exported in the shell")
        for name in sorted(shell)
        if looks_like_the_kits(name) and not known(name)
    ]
    return lines


def check(env_file: Path, shell: Mapping[str, str]) -> list[str]:
    """unknown_names for a settings file on disk (none when it does not exist)."""
    keys = list(dotenv_values(env_file, interpolate=False)) if env_file.exists() else []
    return unknown_names(keys, shell, env_file.name)
