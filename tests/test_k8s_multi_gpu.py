"""The multi-GPU work pool's Kubernetes manifests (infra/k8s/multi-gpu/), validated against
the Kubernetes API's JSON schemas (kubernetes-validate, strict: no unknown fields) after
Prefect renders the base job template the way its worker does; and the concurrency slots a
multi-GPU run takes on its node."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml
from k8s_manifests import K8S, KUBERNETES, rendered_job

from kernelwatch.flows.tasks import device_slot_names

MULTI_GPU = K8S / "multi-gpu"


def test_the_multi_gpu_job_takes_a_whole_node_and_is_a_valid_job():
    """The node's eight GPUs are its runner's (runner.yaml, where the kernels run); the flow
    run's pod sits beside that runner on the same node and holds no GPU (issue 29)."""
    template = json.loads((MULTI_GPU / "gpu-h100x8.json").read_text())
    job = rendered_job(template)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert kubernetes_validate.validate(job, KUBERNETES, strict=True)
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    (runner,) = yaml.safe_load_all((MULTI_GPU / "runner.yaml").read_text())
    assert kubernetes_validate.validate(runner, KUBERNETES, strict=True)
    (runs,) = runner["spec"]["template"]["spec"]["containers"]
    assert runs["resources"]["requests"]["nvidia.com/gpu"] == 8
    assert runs["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "dshm", "mountPath": "/dev/shm"} in runs["volumeMounts"]
    (near,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert near["labelSelector"]["matchLabels"] == runner["spec"]["template"]["metadata"]["labels"]


def test_the_multi_gpu_worker_is_a_valid_deployment_of_its_pool():
    (worker,) = yaml.safe_load_all((MULTI_GPU / "worker.yaml").read_text())
    assert kubernetes_validate.validate(worker, KUBERNETES, strict=True)
    script = worker["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "--base-job-template /templates/gpu-h100x8.json" in script
    kustomization = yaml.safe_load((MULTI_GPU / "kustomization.yaml").read_text())
    assert kustomization["configMapGenerator"][0]["files"] == ["gpu-h100x8.json"]


def test_a_broken_manifest_is_refused_by_the_validator():
    (worker,) = yaml.safe_load_all((MULTI_GPU / "worker.yaml").read_text())
    worker["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError, match="'one' is not of type"):
        kubernetes_validate.validate(worker, KUBERNETES, strict=True)


def test_a_multi_gpu_run_holds_every_gpu_of_its_node(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    names = device_slot_names(8)
    assert len(names) == 8 and len(set(names)) == 8
    assert device_slot_names(1) == names[:1]  # a single-GPU worker of the host competes
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [n.rsplit("-", 1)[1] for n in device_slot_names(8)] == ["gpu2", "gpu3"]
