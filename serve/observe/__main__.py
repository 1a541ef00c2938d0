"""`python -m serve.observe`: write the Prometheus scrape configuration for the engines the settings run, and say
what it scrapes. up.sh writes it too when PROMETHEUS=true; compose's observe profile mounts it."""

from __future__ import annotations

import sys

from serve.config.paths import ROOT
from serve.config.settings import Settings
from serve.observe import scrape
from ui.cli import KitArgumentParser
from ui.progress import console, fail
from ui.values import SettingsError


def main(argv: list[str] | None = None) -> int:
    parser = KitArgumentParser(prog="python -m serve.observe", description=__doc__)
    parser.parse_args(argv)
    try:
        settings = Settings.load()
    except SettingsError as exc:
        fail(str(exc), code=2)
        return 2
    path = scrape.write(settings)
    console.print(f"Wrote {path.relative_to(ROOT)}", highlight=False)
    for job in scrape.jobs(settings):
        console.print(f"  job {job.name}: {', '.join(job.targets)}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
