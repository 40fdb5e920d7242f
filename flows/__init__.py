"""Prefect orchestration: the nightly, pull-request and bisection flows, their tasks and
deployments, notifications and the demo repository."""
