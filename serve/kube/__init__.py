"""Kubernetes from the same settings: `python -m serve.kube` (its __main__.py) writes production-stack Helm values
(values.py) and plain manifests (manifests.py) from one engine spec (spec.py)."""
