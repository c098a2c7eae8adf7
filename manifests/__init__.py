"""Kubernetes manifests: `gpuhealth deploy build` renders deploy/kubernetes/ from settings, rules and dashboards.

A component: it imports only `core` (the settings' defaults, the version); the rule file and the
dashboards are read as generated files, so alerts/ and dashboards/ stay independent of it.
"""
