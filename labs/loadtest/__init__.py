"""MEASURE: the load tester. workload (what and when) -> runner (sending) -> aggregate (metrics) -> reports."""
