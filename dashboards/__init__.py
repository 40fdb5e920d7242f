"""Grafana dashboards and alert rules as code (generated JSON, export and push)."""
