"""MEASURE: the load tester. workload (what and when) -> runner (sending) -> aggregate (metrics) -> reports.

`python -m labs.loadtest` (labs/loadtest.md) is one user of this library; a script of your own is another:

    import asyncio
    from client.endpoint import Endpoint
    from labs.loadtest import WorkloadSpec, parse_lengths, run_load, summarize

    spec = WorkloadSpec(num_requests=8, rate_rps=None, concurrency=4, lengths=parse_lengths("fixed:32"))
    vllm = Endpoint.at("vllm", "http://127.0.0.1:8009/v1", "HuggingFaceTB/SmolLM2-135M-Instruct")
    result = asyncio.run(run_load(vllm, spec))
    print(summarize(result.records).output_tokens_per_s)
"""

from labs.loadtest.aggregate import Summary, summarize
from labs.loadtest.runner import RunResult, run_load
from labs.loadtest.workload import WorkloadSpec, parse_lengths

__all__ = ["RunResult", "Summary", "WorkloadSpec", "parse_lengths", "run_load", "summarize"]
