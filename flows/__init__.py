"""Prefect orchestration and the ``kernelwatch`` command line."""
