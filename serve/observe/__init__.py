"""Observing the engines: one Prometheus scrape configuration from the settings (scrape.py), the kit's native
Prometheus (prometheus.py), and Grafana's provisioning for compose's `observe` profile (grafana/: vLLM's and
production-stack's dashboards, with their licence)."""
