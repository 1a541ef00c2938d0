"""The contract checks as one function: the engines and the checks in, every check's record out, the matrix shown
and written. `python -m labs.contract` builds a `Contract` from its command line; the tour builds one from its sizes.

Every engine answers before any is checked (`EndpointError`: nothing measured); an engine that stops answering
part-way stops the run (`ContractStopped`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from client.endpoint import Endpoint, EndpointError
from labs.contract.probe import MAX_TOKENS, CheckRecord
from labs.contract.registry import CHECKS, run_all
from labs.contract.report import difference_lines, matrix_lines, payload, write_html, write_results
from labs.results import Envelope, MeasuredEngine
from ui.progress import console


class ContractStopped(RuntimeError):
    """An engine stopped answering while it was being checked; the message names it."""


@dataclass(frozen=True, slots=True)
class Contract:
    """Which engines, which checks (all of them by default), where the results go; `command` runs it again."""

    endpoints: Sequence[Endpoint]
    folder: Path
    command: str
    checks: Sequence[str] = field(default_factory=lambda: tuple(CHECKS))

    def __post_init__(self) -> None:
        unknown = [name for name in self.checks if name not in CHECKS]
        if unknown or not self.checks or not self.endpoints:
            raise ValueError(
                f"unknown check(s) {', '.join(unknown) or '(none given)'} or no engine: name at least one engine and "
                f"checks among {', '.join(CHECKS)}"
            )


@dataclass(frozen=True, slots=True)
class Checked:
    """Every check's record, as contract.json holds them, and the files written."""

    payload: dict[str, Any]
    records: list[CheckRecord]
    paths: list[Path]


def check_contract(config: Contract) -> Checked:
    for endpoint in config.endpoints:  # every engine answers before any is checked: bad input stops here
        endpoint.check()
    console.print(
        f"Checking {len(config.checks)} parts of the OpenAI contract (answers of at most {MAX_TOKENS} "
        f"tokens, a few longer) on {', '.join(endpoint.name for endpoint in config.endpoints)}"
    )
    records: list[CheckRecord] = []
    for endpoint in config.endpoints:
        with console.status(f"{endpoint.name} at {endpoint.base_url}, model {endpoint.model} ..."):
            try:
                found = run_all(endpoint, tuple(config.checks))
            except EndpointError as exc:
                raise ContractStopped(f"{exc} (stopped while checking {endpoint.name})") from None
        took_s = sum(record.duration_s for record in found)
        console.print(f"{endpoint.name}: {len(found)} checks in {took_s:.1f} s", markup=False)
        records += found
    names = [endpoint.name for endpoint in config.endpoints]
    console.print("\n" + "\n".join(matrix_lines(records, names)), markup=False, highlight=False, soft_wrap=True)
    differences = difference_lines(records)
    if differences:
        console.print("\nWhat differs, and the evidence:", markup=False)
        console.print("\n".join(differences), markup=False, highlight=False, soft_wrap=True)
    envelope = Envelope.now(
        config.command,
        [MeasuredEngine(endpoint.model, endpoint.base_url, endpoint.kind or None) for endpoint in config.endpoints],
    )
    written = write_results(config.folder, envelope, config.endpoints, records)
    page = write_html(config.folder, envelope, config.endpoints, records)
    console.print(f"\nwrote {written} and {page}", markup=False, soft_wrap=True)
    return Checked(payload(config.endpoints, records), records, [written, page])
