"""The user's pip configuration, read by pip itself, and handed to uv (which reads no pip configuration).

The native install puts its ~150 packages in with uv (several times faster than pip here: labs/throughput.md),
so that a mirror, extra index, find-links folder, certificate, proxy or constraint the user gave pip still
applies. `pip config list` prints every value pip would use (its files and PIP_* variables) as
`section.key='value'`; pip lets `install.` override `global.`, and the environment override both.
A key uv cannot be told keeps the install on pip (`uv_unsupported`), so nothing the user set is lost.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

UV_VERSION = "0.13.9"  # pip installs it into the venv, then it installs the rest

SECTION_ORDER = ("global", "install", ":env:")  # later wins, as in pip's own option parser
# Keys that do not change what is installed from where (uv has its own cache, progress and logging).
IGNORED_KEYS = frozenset(
    {
        "disable-pip-version-check",
        "retries",
        "progress-bar",
        "no-cache-dir",
        "cache-dir",
        "quiet",
        "verbose",
        "no-color",
        "root-user-action",
        "no-input",
        "require-virtualenv",
        "log",
        "no-python-version-warning",
        "use-feature",
        "break-system-packages",
        "config-file",
    }
)
LIST_KEYS = frozenset({"extra-index-url", "find-links", "trusted-host", "constraint"})
MAPPED_KEYS = LIST_KEYS | {"index-url", "cert", "client-cert", "proxy", "timeout", "default-timeout", "no-index"}


@dataclass(frozen=True, slots=True)
class PipConfig:
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, listing: str) -> PipConfig:
        """`pip config list` output -> the effective value of each key."""
        by_section: dict[str, dict[str, str]] = {section: {} for section in SECTION_ORDER}
        for line in listing.splitlines():
            name, sep, raw = line.partition("=")
            section, dot, key = name.rpartition(".")
            if not sep or not dot or section not in by_section:
                continue
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                value = raw
            by_section[section][key.replace("_", "-")] = str(value)
        effective: dict[str, str] = {}
        for section in SECTION_ORDER:
            effective.update(by_section[section])
        return cls(effective)

    def _list(self, key: str) -> list[str]:
        return self.values.get(key, "").split()

    @property
    def uv_unsupported(self) -> list[str]:
        """Keys set here that uv cannot be told (then the install stays on pip)."""
        return sorted(key for key in self.values if key not in MAPPED_KEYS | IGNORED_KEYS)

    def uv_args(self) -> list[str]:
        """uv pip install flags with pip's meaning: every index consulted, the best version wins."""
        args = ["--index-strategy", "unsafe-best-match"]
        if self.values.get("index-url"):
            args += ["--index-url", self.values["index-url"]]
        for flag, key in (
            ("--extra-index-url", "extra-index-url"),
            ("--find-links", "find-links"),
            ("--allow-insecure-host", "trusted-host"),
            ("--constraint", "constraint"),
        ):
            for value in self._list(key):
                args += [flag, value]
        if self.values.get("no-index", "").lower() in ("1", "true", "yes", "on"):
            args.append("--no-index")
        return args

    def uv_env(self) -> dict[str, str]:
        """Variables uv reads for what pip's configuration says about TLS, proxies and timeouts."""
        env: dict[str, str] = {}
        if self.values.get("cert"):
            env["SSL_CERT_FILE"] = self.values["cert"]
        if self.values.get("client-cert"):
            env["SSL_CLIENT_CERT"] = self.values["client-cert"]
        if self.values.get("proxy"):
            env.update(HTTPS_PROXY=self.values["proxy"], HTTP_PROXY=self.values["proxy"])
        timeout = self.values.get("timeout") or self.values.get("default-timeout")
        if timeout:
            env["UV_HTTP_TIMEOUT"] = timeout
        return env


PROGRESS_PREFIXES = (
    "Collecting",
    "Downloading",
    "Processing",
    "Installing",
    "Building",
    "Successfully",
    "Resolved",
    "Prepared",
    "Installed",
    "Downloaded",
    "Bytecode compiled",
)


def progress_line(line: str) -> bool:
    """Whether a line of pip's or uv's output says how an install is getting on (what the step's progress shows)."""
    return line.lstrip().startswith(PROGRESS_PREFIXES)


def read(python: str) -> PipConfig:
    """The configuration the pip of `python`'s environment would use now."""
    listing = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    return PipConfig.parse(listing)


@dataclass(frozen=True, slots=True)
class Installer:
    """The command that installs into a venv, its environment, its name, and why pip if it is pip."""

    argv: list[str]
    env: dict[str, str]
    name: str
    why_pip: str = ""


def installer(python: str, quiet: bool = False) -> Installer:
    """What installs into `python`'s venv: uv (installed there first, by pip) with the user's pip configuration
    handed over, or pip itself where that configuration says more than uv hears."""
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    config = read(python)
    if config.uv_unsupported:
        return Installer(
            [*pip, "install", *(["-q"] if quiet else [])],
            dict(os.environ),
            "pip",
            f"your pip configuration sets {', '.join(config.uv_unsupported)}, which uv cannot be told",
        )
    subprocess.run([*pip, "install", "-q", f"uv=={UV_VERSION}"], check=True)
    uv = str(Path(python).parent / "uv")
    return Installer(
        [uv, "pip", "install", "--python", python, *(["-q"] if quiet else []), *config.uv_args()],
        {**os.environ, **config.uv_env()},
        "uv",
    )


def main(argv: list[str]) -> int:
    """`python3 serve/install/pip_config.py VENV_PYTHON PACKAGE...`: install into that venv (serve/light-tools.sh)."""
    if len(argv) < 2:
        print("usage: python3 serve/install/pip_config.py VENV_PYTHON PACKAGE_OR_FLAG...", file=sys.stderr)
        return 2
    chosen = installer(argv[0], quiet=True)
    os.execvpe(chosen.argv[0], [*chosen.argv, *argv[1:]], chosen.env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
