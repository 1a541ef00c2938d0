"""The value parsers that settings and command lines share: the ground floor, importing nothing of the kit.

A parser takes the name of what is being set and its text, and returns the value or raises SettingsError whose one
line names the variable, the bad value and the fix. serve/config/settings.py declares every setting with these (and
its own); ui/cli.py turns the same ones into flag types, so a flag and a setting of one kind refuse the same values.
"""

from __future__ import annotations

import ipaddress
import math
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

N = TypeVar("N", int, float)
IMAGE_VERSION_TAG = re.compile(r"^v?(\d+)\.(\d+)[\w.+-]*$")  # the vLLM version an image ships: (major, minor)
INDEX_URL = re.compile(r"^(https?|file)://\S+$")
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*(\|\d+(-\d+)?(,\d+(-\d+)?)*)*$")  # vLLM's binding: 0-1|2-3


class SettingsError(ValueError):
    """A setting (or a flag) is wrong; the message names the variable, the bad value and the fix."""


def invalid(name: str, raw: str, fix: str) -> SettingsError:
    return SettingsError(f"{name}={raw!r} is invalid: {fix}")


def bounded(convert: Callable[[str], N], within: Callable[[N], bool], fix: str) -> Callable[[str, str], N]:
    """A parser of numbers: `convert` reads the value, `within` accepts it; else one line naming the fix."""

    def parse(name: str, raw: str) -> N:
        try:
            value = convert(raw)
        except ValueError:
            raise invalid(name, raw, fix) from None
        if not within(value):
            raise invalid(name, raw, fix)
        return value

    return parse


positive_int = bounded(int, lambda value: value > 0, "use a whole number greater than 0")
non_negative_int = bounded(int, lambda value: value >= 0, "use a whole number, 0 or more")
# floats: nan and inf are no sizes or fractions
positive_number = bounded(float, lambda value: 0 < value < float("inf"), "use a number greater than 0")
non_negative_number = bounded(float, lambda value: 0 <= value < float("inf"), "use a number, 0 or more")


def tcp_port(name: str, raw: str) -> int:
    value = positive_int(name, raw)
    if value > 65535:
        raise invalid(name, raw, "use a TCP port between 1 and 65535")
    return value


def choice(*options: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in options:
            raise invalid(name, raw, f"use one of {', '.join(options)}")
        return raw

    return parse


fraction = bounded(float, lambda value: 0 < value <= 1, "use a fraction greater than 0 and at most 1, such as 0.90")


def auto_or_positive_int(name: str, raw: str) -> int | None:
    """A whole number > 0, or None for `auto` (resolved against the machine at start)."""
    return None if raw == "auto" else positive_int(name, raw)


def auto_or_whole_gib(name: str, raw: str) -> int | None:
    """Whole GiB (vLLM reads VLLM_CPU_KVCACHE_SPACE with int() and dies on '1.5'), or None for `auto`."""
    if raw == "auto":
        return None
    try:
        value = positive_number(name, raw)
    except SettingsError:
        raise invalid(name, raw, "use auto or a whole number of GiB greater than 0, e.g. 2") from None
    if not value.is_integer():
        whole = sorted({max(1, math.floor(value)), math.ceil(value)})
        raise invalid(
            name,
            raw,
            "vLLM reads it as whole GiB (int()) and would die at start; use auto or "
            f"{' or '.join(str(gib) for gib in whole)}",
        )
    return int(value)


def thread_binding(name: str, raw: str) -> str:
    if raw in ("auto", "nobind") or CPU_LIST.match(raw):
        return raw
    raise invalid(name, raw, "use auto, nobind, or a CPU list such as 0-1 (ranks separated by |)")


def bearer_key(name: str, raw: str) -> str:
    if any(ch.isspace() for ch in raw):
        raise invalid(name, raw, "an API key must not contain spaces, tabs or newlines; remove them")
    return raw


def auto_or_boolean(name: str, raw: str) -> bool | None:
    """true or false, or None for `auto` (resolved against the machine at start)."""
    return None if raw.strip().lower() == "auto" else boolean(name, raw)


def boolean(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise invalid(name, raw, "use true or false")


def index_url(name: str, raw: str) -> str:
    """A pip index URL (PEP 503 "simple" layout), or empty for none."""
    if raw and not INDEX_URL.match(raw):
        raise invalid(
            name,
            raw,
            "use an index URL such as https://download.pytorch.org/whl/cpu (http, https or "
            "file), or leave it empty to use only your pip configuration",
        )
    return raw.rstrip("/")


OLLAMA_PREFIX = "ollama:"  # MODEL_PATH=ollama:<name>[:<tag>]: a model of the learner's own Ollama store
OLLAMA_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)?(:[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def model_location(name: str, raw: str) -> str | None:
    """MODEL_PATH: a Hugging Face model folder (config.json, weights, tokenizer), a .gguf file, or
    ollama:<name>[:<tag>]; None for the bundled model. Files and folders come back as absolute paths; which model an
    Ollama name is, is serve/config/model_source.py's to find."""
    if not raw:
        return None
    if raw.startswith(OLLAMA_PREFIX):
        if not OLLAMA_NAME.match(raw.removeprefix(OLLAMA_PREFIX)):
            raise invalid(name, raw, "write an Ollama model as `ollama list` names it: ollama:llama3.2:1b")
        return raw
    path = Path(raw).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return str(path.absolute())  # not resolved: a link's own name is the name it is served under
    if not (path / "config.json").is_file():
        raise invalid(
            name,
            raw,
            "no config.json there: point it at a Hugging Face model folder (config.json, *.safetensors, tokenizer "
            "files), a .gguf file, or ollama:<name>[:<tag>] from your Ollama; leave it empty for the bundled SmolLM2",
        )
    return str(path.resolve())


def own_model_name(location: str) -> str:
    """The name a learner's model is served under when MODEL_NAME is left at the bundled model's: the Ollama name
    (clients of their Ollama keep asking for it), else the .gguf file's or the folder's name."""
    if location.startswith(OLLAMA_PREFIX):
        return location.removeprefix(OLLAMA_PREFIX)
    path = Path(location)
    return path.stem if path.suffix == ".gguf" else path.name


def text(name: str, raw: str) -> str:
    if not raw.strip():
        raise invalid(name, raw, "it must not be empty")
    return raw


def bind_host(name: str, raw: str) -> str:
    """An address or host name to bind: 127.0.0.1, ::1, 0.0.0.0, localhost; never address:port."""
    if not raw.strip() or any(ch.isspace() for ch in raw):
        raise invalid(name, raw, "use an address to bind, such as 127.0.0.1 (or 0.0.0.0 to expose it)")
    bare = raw.removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    address, colon, port_text = raw.rpartition(":")
    if colon:
        raise invalid(
            name,
            raw,
            f"it is an address to bind, without a port: set {name}={address or '127.0.0.1'} "
            f"and VLLM_PORT={port_text or 8009}",
        )
    if not HOST_NAME.match(raw):
        raise invalid(name, raw, "use an IP address (127.0.0.1, ::1, 0.0.0.0) or a host name such as localhost")
    return raw


def image_vllm_version(tag: str) -> tuple[int, int]:
    """'0.9.1-oe2403lts' or 'v0.11.0' -> (0, 9) / (0, 11): the vLLM version an image tag starts with."""
    match = IMAGE_VERSION_TAG.match(tag)
    if match is None:
        raise ValueError(f"image tag {tag!r} does not start with its vLLM version, such as 0.9.1-oe2403lts")
    return int(match.group(1)), int(match.group(2))


def image_version_tag(name: str, raw: str) -> str:
    """An image tag that starts with the vLLM version it ships, e.g. 0.9.1-oe2403lts."""
    if not IMAGE_VERSION_TAG.match(raw):
        raise invalid(name, raw, "use a tag that starts with its vLLM version, such as 0.9.1-oe2403lts")
    return raw


def base_image(name: str, raw: str) -> str:
    """An image repository, optionally with a tag that starts with its vLLM version (repo:0.32.0-standin)."""
    repository, _, tag = raw.rpartition(":") if ":" in raw.rsplit("/", 1)[-1] else (raw, "", "")
    if not repository.strip() or any(ch.isspace() for ch in raw) or (tag and not IMAGE_VERSION_TAG.match(tag)):
        raise invalid(
            name,
            raw,
            "use an image repository such as openeuler/vllm-cpu (its tag is CPU_IMAGE_TAG), or "
            "repository:tag with a tag that starts with its vLLM version",
        )
    return raw


def pinned_image(name: str, raw: str) -> str:
    tag = raw.rsplit(":", 1)[1] if ":" in raw.rsplit("/", 1)[-1] else ""
    if not tag or tag == "latest" or any(ch.isspace() for ch in raw):
        raise invalid(name, raw, "pin a tag, such as vllm/vllm-openai:v0.32.0 (latest changes under you)")
    return raw


def arg_list(name: str, raw: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise invalid(name, raw, f"quote it as you would in a shell ({exc})") from None
