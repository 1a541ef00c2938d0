"""The user's pip configuration, as pip itself reports it, handed to uv with the same meaning."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from serve.install.pip_config import PipConfig


def pip_config_list(config_file: Path, **env: str) -> str:
    """What `pip config list` prints for a user whose only configuration is `config_file` plus `env`."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    return subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, "PIP_CONFIG_FILE": str(config_file), **env},
    ).stdout


def test_a_mirror_extra_indexes_find_links_and_tls_reach_uv(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "extra-index-url = https://a.example/simple https://b.example/simple\n"
        "cert = /etc/ssl/corp.pem\ntimeout = 60\nproxy = http://proxy.example:3128\n"
        "[install]\ntrusted-host = a.example\nconstraint = /etc/constraints.txt\n"
    )
    config = PipConfig.parse(pip_config_list(conf, PIP_FIND_LINKS="/srv/wheels"))
    assert config.uv_unsupported == []
    assert config.uv_args() == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "https://a.example/simple",
        "--extra-index-url",
        "https://b.example/simple",
        "--find-links",
        "/srv/wheels",
        "--allow-insecure-host",
        "a.example",
        "--constraint",
        "/etc/constraints.txt",
    ]
    assert config.uv_env() == {
        "SSL_CERT_FILE": "/etc/ssl/corp.pem",
        "HTTPS_PROXY": "http://proxy.example:3128",
        "HTTP_PROXY": "http://proxy.example:3128",
        "UV_HTTP_TIMEOUT": "60",
    }


def test_the_environment_overrides_install_which_overrides_global(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://global.example/simple\n[install]\nindex-url = https://install.example/simple\n"
    )
    assert PipConfig.parse(pip_config_list(conf)).values["index-url"] == "https://install.example/simple"
    from_env = PipConfig.parse(pip_config_list(conf, PIP_INDEX_URL="https://env.example/simple"))
    assert from_env.values["index-url"] == "https://env.example/simple"


def test_a_setting_uv_cannot_honour_keeps_the_install_on_pip(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nonly-binary = :all:\nno-cache-dir = true\n[install]\npre = true\n")
    config = PipConfig.parse(pip_config_list(conf))
    assert config.uv_unsupported == ["only-binary", "pre"]  # no-cache-dir changes nothing that is installed


def test_no_configuration_means_pypi_alone() -> None:
    config = PipConfig.parse(pip_config_list(Path(os.devnull)))
    assert config.values == {"config-file": os.devnull}  # PIP_CONFIG_FILE itself, which uv need not hear
    assert config.uv_unsupported == [] and config.uv_args() == ["--index-strategy", "unsafe-best-match"]
    assert config.uv_env() == {}
