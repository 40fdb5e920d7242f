"""Every Kubernetes manifest under infra/k8s/, as the cluster would receive it: each YAML
document, and each Prefect base job template's Job rendered the way the worker renders it
(every variable at its default, plus what the worker supplies itself). Kustomizations are
kustomize's input, not the cluster's, and are listed apart."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

K8S = Path(__file__).parent.parent / "infra" / "k8s"
#: The Kubernetes version the manifests are validated against (kubernetes-validate's schemas).
KUBERNETES = "1.30"


def rendered_job(template: dict) -> dict:
    """The Job a Prefect Kubernetes worker would create from ``template`` for a flow run."""
    from prefect.utilities.templating import apply_values

    values = {k: v["default"] for k, v in template["variables"]["properties"].items()
              if "default" in v}  # fmt: skip
    values |= {
        "name": "nightly-run",
        "command": "prefect flow-run execute",
        "labels": {"prefect.io/flow-run-name": "nightly-run"},
        "service_account_name": "default",
        "job_watch_timeout_seconds": 600,
    }
    job = apply_values(template["job_configuration"]["job_manifest"], values)
    # As prefect-kubernetes' KubernetesWorkerJobConfiguration.prepare_for_flow_run: the first
    # container's env is the worker's, put before the template's own list when it has one
    # (an env of fieldRefs), and its args string is split into the args.
    first = job["spec"]["template"]["spec"]["containers"][0]
    worker_env = [{"name": k, "value": v} for k, v in values["env"].items()]
    own = first.get("env")
    first["env"] = [*worker_env, *own] if isinstance(own, list) else worker_env
    for container in job["spec"]["template"]["spec"]["containers"]:
        container["args"] = shlex.split(container["args"])
    return job


def job_templates() -> dict[str, dict]:
    """Every base job template under infra/k8s/, by its path relative to it."""
    found = {}
    for path in sorted(K8S.rglob("*.json")):
        data = json.loads(path.read_text())
        if "job_manifest" in data.get("job_configuration", {}):
            found[str(path.relative_to(K8S))] = data
    return found


def documents() -> dict[str, dict]:
    """Every manifest the cluster receives, by ``path#index`` (YAML) or ``path`` (a
    template's rendered Job)."""
    found = {}
    for path in sorted([*K8S.rglob("*.yaml"), *K8S.rglob("*.yml")]):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc and doc.get("kind") != "Kustomization":
                found[f"{path.relative_to(K8S)}#{index}"] = doc
    for name, template in job_templates().items():
        found[name] = rendered_job(template)
    return found


def kustomizations() -> dict[Path, dict]:
    """Every kustomization under infra/k8s/, by its directory."""
    return {
        path.parent: yaml.safe_load(path.read_text())
        for path in sorted(K8S.rglob("kustomization.yaml"))
    }
