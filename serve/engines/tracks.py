"""The Docker tracks and what compose gets for each: the service, its limits, and the settings as compose reads them.

compose.yaml reads the same settings as the native runtime, as `${VAR:-default}`. Its command line is the one
mapping's (serve/config/vllm_flags.py) rendered for the track's vLLM (--swap-space only for an image's vLLM below 0.18,
which removed it), exported whole as RESOLVED_ARGS, and what else a container cannot work out for itself reaches it as
RESOLVED_* variables derived from that mapping (compose_env): the values behind `auto` (resolved by the one resolver
against the container's caps, `container_limits`) and the image's spelling of "no thread binding".
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from serve.config.chat_template import BUNDLED_TOOLS_TEMPLATE
from serve.config.machine import Machine
from serve.config.model import model_facts_for, served_chat_template
from serve.config.plan import Plan, RuntimeLimits, resolve
from serve.config.preflight import block_size_for
from serve.config.settings import KNOBS, VLLM_VERSION, Settings
from serve.config.sizing import V1_GPU_BLOCK_SIZE
from serve.config.vllm_flags import FLAGS, Target, argv_of, parse_version, vllm_args, vllm_env, vllm_flags

CONTAINER_HOST = "0.0.0.0"  # inside the container; the published port stays on VLLM_HOST
CONTAINER_PORT = 8000


@dataclass(frozen=True, slots=True)
class Track:
    """One way to serve in containers: its RUNTIME value, compose service, profiles, image source, and the setting
    of the port compose.yaml publishes it on."""

    runtime: str
    service: str
    profiles: tuple[str, ...]
    builds_image: bool
    port_setting: str


CPU = Track("docker", "vllm-cpu", (), builds_image=True, port_setting="VLLM_PORT")
GPU = Track("docker-gpu", "vllm-gpu", ("gpu",), builds_image=False, port_setting="GPU_PORT")
TRACKS = {track.runtime: track for track in (CPU, GPU)}


def container_limits(settings: Settings, machine: Machine, track: Track, pod: bool = False) -> RuntimeLimits:
    """What a track's container may use. CPU: the host's cores capped by CPU_LIMIT, MEMORY_LIMIT, the image's vLLM's
    own block size (V0's 16 below 0.10). GPU: the GPU's memory, vLLM's 16-token blocks."""
    if track is GPU:
        return RuntimeLimits(cores=1, memory_bytes=None, engine_block_size=V1_GPU_BLOCK_SIZE, container=True, gpu=True)
    return RuntimeLimits(
        cores=max(1, min(machine.usable_cores, math.floor(settings.cpu_limit))),
        memory_bytes=settings.memory_limit.num_bytes,
        engine_block_size=block_size_for(settings, track.runtime),
        container=True,
        where=f"CPU_LIMIT={settings.cpu_limit:g}",
        unseen_node=pod,
        vllm_version=settings.cpu_image_vllm_version,
    )


def plan_for_container(settings: Settings, machine: Machine, track: Track, pod: bool = False) -> Plan:
    """The one resolver (serve/config/plan.py) for the track's container on `machine` (the host, or with `pod` a
    cluster's node, unseen)."""
    limits = container_limits(settings, machine, track, pod)
    template = served_chat_template(settings, track.runtime)
    return resolve(settings, machine, model_facts_for(settings, track.runtime), limits, template)


PLUGINS_IN_CONTAINER = "/opt/vllm-lab-kit/plugins"  # serve/engine_plugins: copied by Dockerfile.cpu, mounted on GPU


def target(settings: Settings, track: Track) -> Target:
    """Where the track's flags go: vLLM in the container on 0.0.0.0:8000, loading MODEL_NAME; the CPU image's vLLM
    (CPU_IMAGE_TAG's) or the GPU image's (the kit's VLLM_VERSION, which GPU_IMAGE pins). The kit's tool-call template
    there is the bundled model's (a hub model's own template is not known here, so the plan never composes one)."""
    version = settings.cpu_image_vllm_version if track is CPU else parse_version(VLLM_VERSION)
    template = f"{PLUGINS_IN_CONTAINER}/{BUNDLED_TOOLS_TEMPLATE.name}"
    return Target(
        settings.model_name, CONTAINER_HOST, CONTAINER_PORT, version, gpu=track is GPU, chat_template=template
    )


def container_command(settings: Settings, plan: Plan, track: Track) -> list[str]:
    """The argv the track's compose service renders to: the one mapping's (RESOLVED_ARGS, then VLLM_EXTRA_ARGS)."""
    return vllm_args(settings, plan, target(settings, track))


def container_env(settings: Settings, plan: Plan, track: Track) -> dict[str, str]:
    """The environment the track's container runs vLLM with, as compose.yaml's `environment:` renders it
    (compose always sets VLLM_API_KEY, empty for none; the GPU image finds the kit's key middleware on PYTHONPATH)."""
    env = {**vllm_env(settings, plan, target(settings, track)), "VLLM_API_KEY": settings.api_key}
    return {**env, "PYTHONPATH": PLUGINS_IN_CONTAINER} if track is GPU else env


def _export(value: object) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return shlex.join(value)
    return str(value)


ARGS = "RESOLVED_ARGS"  # every flag of the mapping, in its order: compose.yaml's command
OPTIONAL_ARGS = "RESOLVED_OPTIONAL_ARGS"  # every optional flag of the mapping, in its order


def compose_env(settings: Settings, plan: Plan, track: Track) -> dict[str, str]:
    """Every knob as compose reads it, and what compose cannot work out for itself, from the one mapping: every flag
    as RESOLVED_ARGS (compose.yaml's command: a flag added to FLAGS reaches compose with no edit there); for each
    flag, RESOLVED_<FLAG> (its value) and RESOLVED_<FLAG>_ARGS (the flag and its value, or nothing); the optional flags
    together as RESOLVED_OPTIONAL_ARGS; for each variable of the container's environment, RESOLVED_<NAME>."""
    env = {knob.env: _export(getattr(settings, knob.field)) for knob in KNOBS}
    rendered = dict(vllm_flags(settings, plan, target(settings, track)))
    for flag in FLAGS:
        value = rendered.get(flag)
        env[flag.compose_name] = value or ""
        env[f"{flag.compose_name}_ARGS"] = shlex.join(argv_of([(flag, value)])) if value is not None else ""
    env[ARGS] = shlex.join(argv_of(list(rendered.items())))
    env[OPTIONAL_ARGS] = shlex.join(argv_of([(flag, value) for flag, value in rendered.items() if flag.optional]))
    env.update({f"RESOLVED_{name}": value for name, value in container_env(settings, plan, track).items()})
    return env
