"""The soak with faults, suite-sized: two real replicas behind the real router under load above capacity, one
replica's API server and then the other's engine core SIGKILLed, the kit's supervisor bringing each back.
The benchmark's own verdicts are the checks (it exits 1 on any FAIL); this test reads them and the counts.

It is also the suite's failover-under-load test on the default policy (cache_aware, .env.example's ROUTER_POLICY):
a request sent after a kill that fails is "other", and "other" must be 0; the cut ones are no more than the victim
held; each victim is healthy again and back in the router's rotation before the next kill."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from labs import results
from serve.config.settings import Settings
from tests.conftest import kit_env, run_bounded

pytestmark = [pytest.mark.server, pytest.mark.slow]
VERDICTS = (
    "nothing but completed, hung up or cut by a kill",
    "no more cut than the victims held",
    "KV usage back to 0, nothing running or waiting",
    "no kit process outside the recorded groups",
    "every group's RSS within",
)


def test_a_suite_sized_soak_loses_only_what_the_kills_cut_and_both_replicas_come_back(tmp_path: Path) -> None:
    # 12 users over 2 x 4 sequences: above capacity (requests wait at each replica) with a step a quarter as big as
    # the benchmark's, so a killed replica comes back in the time a restart takes, not a restart under full load;
    # eager replicas start without a compile
    env = kit_env(ENFORCE_EAGER="true", VLLM_CPU_KVCACHE_SPACE="1", MAX_NUM_SEQS="4")
    assert Settings.from_env(env).router_policy == "cache_aware"  # the kit's default: the policy users fail over with
    result = run_bounded(
        [sys.executable, "-m", "benchmarks.soak", "--users", "12", "--kill-after-s", "10", "--settle-s", "5"]
        + ["--out", str(tmp_path)],
        env,
        timeout_s=1500,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    kills = re.findall(r"SIGKILL vLLM replica [12]/2's (api server|engine core) \(pid \d+\)", result.stdout)
    assert kills == ["api server", "engine core"], output
    assert len(re.findall(r"healthy again \d+ s after the kill", result.stdout)) == 2, output
    counts = re.search(
        r"(\d+) requests in \d+ s of load: (\d+) completed, (\d+) aborted by their own client, "
        r"(\d+) in flight on a killed process .*, (\d+) other",
        result.stdout,
    )
    assert counts, output
    total, completed, hung_up, cut, other = map(int, counts.groups())
    assert total == completed + hung_up + cut + other and other == 0, output
    assert completed > 0 and hung_up > 0, output  # the load ran on both sides of the kills, hang-ups included
    for verdict in VERDICTS:
        assert f"PASS: {verdict}" in result.stdout, output
    # the results file holds what was printed
    _, found = results.load(tmp_path / "results.json")
    assert (found["requests"], found["completed"], found["in_flight_on_killed"]) == (total, completed, cut)
    assert found["max_num_seqs"] == "4" and len(found["back_after_s"]) == 2 and all(found["verdicts"].values())
    print(f"soak: back {found['back_after_s']} s after the kills, {total} requests in {found['load_s']:.0f} s")
