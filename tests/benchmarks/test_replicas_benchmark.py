"""benchmarks/replicas.py's pure parts: which round it reports, and the prefix-sharing workload.

The benchmark itself starts three engines and runs for minutes; labs/scale.md and the README report its numbers.
The routing it measures is tested for real in tests/serve/engines/test_replicas.py.
"""

from __future__ import annotations

from benchmarks.replicas import PREFIX_GROUPS, prefix_messages, typical
from client.stream import RequestRecord
from labs.loadtest.aggregate import summarize


def rounds_at(rates: list[float]) -> list:
    found = []
    for rate in rates:
        record = RequestRecord(0, 10, 0.0)
        record.status, record.sent_s, record.first_token_s, record.done_s = 200, 0.0, 0.1, 10 / rate
        record.output_tokens, record.text = 10, "x" * 10
        found.append(summarize([record]))
    return found


def test_the_reported_round_is_the_median_not_the_best() -> None:
    summaries = rounds_at([50.0, 10.0, 40.0])
    assert round(typical(summaries).output_tokens_per_s) == 40
    assert round(typical(rounds_at([50.0, 10.0, 40.0, 30.0])).output_tokens_per_s) == 30  # the lower middle


def test_prefix_workload_repeats_each_groups_prompt_and_no_two_groups_or_rounds_share_one() -> None:
    first, second = prefix_messages(32, "round_robin0", 0), prefix_messages(32, "round_robin1", 1)
    prompts = {conversation[0]["content"] for conversation in first}
    assert len(prompts) == PREFIX_GROUPS  # every group came up in 32 requests, each prompt repeated
    assert prompts.isdisjoint(conversation[0]["content"] for conversation in second)
    assert len({prompt.split(" rule ")[0] for prompt in prompts}) == PREFIX_GROUPS  # they differ from the start
