"""The multi-node work pool's Kubernetes manifests (infra/k8s/multi-node/): the base job
template rendered the way Prefect's Kubernetes worker renders it and validated against the
Kubernetes API schemas (kubernetes-validate, strict), with the torchrun-style rendezvous the
node agent reads (harness/distributed/nodes.py) wired to the headless Service and allowed by
the NetworkPolicy. tests/test_security_infra.py holds these manifests to the hardening of
every other one."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import yaml
from k8s_manifests import KUBERNETES, rendered_job

from kernelwatch.harness.distributed.nodes import ENV, Nodes

MULTI_NODE = Path(__file__).parent.parent / "infra" / "k8s" / "multi-node"
POOL = "gpu-h100x8x2"


def _job() -> dict:
    return rendered_job(json.loads((MULTI_NODE / f"{POOL}.json").read_text()))


def _manifests() -> dict[str, dict]:
    docs = {}
    for name in ("service.yaml", "networkpolicy.yaml", "worker.yaml"):
        (doc,) = yaml.safe_load_all((MULTI_NODE / name).read_text())
        docs[doc["kind"]] = doc
    return docs


def test_the_multi_node_job_is_an_indexed_job_of_whole_nodes_and_valid():
    job = _job()
    assert kubernetes_validate.validate(job, KUBERNETES, strict=True)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    # The Job is done when pod 0 (the flow run) is: the agents are then ended.
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": 8}
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"  # one pod per node
    # Every pod starts the node agent, which runs the worker's flow command on pod 0.
    assert container["args"] == [
        "python", "-m", "kernelwatch.harness.distributed.agent", "--",
        "prefect", "flow-run", "execute",
    ]  # fmt: skip


def test_the_pods_rendezvous_torchrun_style_through_the_headless_service():
    job = _job()
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert "KERNELWATCH_CONFIG" in env  # the worker's env comes first, as Prefect puts it
    names = [e["name"] for e in pod["containers"][0]["env"]]
    assert set(ENV) <= set(names)
    assert names.index("JOB_NAME") < names.index("MASTER_ADDR")  # $(JOB_NAME) expands
    service = _manifests()["Service"]
    assert kubernetes_validate.validate(service, KUBERNETES, strict=True)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert pod["subdomain"] == service["metadata"]["name"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    # An indexed Job's pod i is host <job-name>-i: pod 0's stable name, in the Service's domain.
    assert env["MASTER_ADDR"]["value"] == f"$(JOB_NAME)-0.{service['metadata']['name']}"
    job_name = env["JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert job_name == "metadata.labels['batch.kubernetes.io/job-name']"
    index = env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["NNODES"]["value"] == str(job["spec"]["completions"])
    # What the agent and the coordinator derive from it, as pod 1 would see it.
    nodes = Nodes.from_env({
        "MASTER_ADDR": "run-0.kernelwatch-nodes", "MASTER_PORT": env["MASTER_PORT"]["value"],
        "NODE_RANK": "1", "NNODES": env["NNODES"]["value"],
    })  # fmt: skip
    assert nodes is not None
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert ports == {nodes.master_port, nodes.agent_port}


def _covered(rule_ports: list[dict], port: int) -> bool:
    return any(p["port"] <= port <= p.get("endPort", p["port"]) for p in rule_ports)


def test_the_pods_of_a_multi_node_job_reach_each_other_on_the_rendezvous_and_nccl_ports():
    policy = _manifests()["NetworkPolicy"]
    assert kubernetes_validate.validate(policy, KUBERNETES, strict=True)
    labels = _job()["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    (ingress,) = policy["spec"]["ingress"]
    (egress,) = policy["spec"]["egress"]
    assert ingress["from"] == egress["to"] == [{"podSelector": policy["spec"]["podSelector"]}]
    env = {
        e["name"]: e.get("value")
        for e in _job()["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    master = int(env["MASTER_PORT"])
    for rule in (ingress["ports"], egress["ports"]):
        assert all(p["protocol"] == "TCP" for p in rule)
        # torch's store, the agents' port, and the ephemeral ports NCCL and gloo listen on.
        for port in (master, master + 1, 32768, 45000, 60999):
            assert _covered(rule, port), port
        for port in (22, 5432, 4200, 10250):  # nothing else of a peer pod
            assert not _covered(rule, port), port


def test_the_multi_node_worker_creates_its_pool_from_the_template():
    worker = _manifests()["Deployment"]
    assert kubernetes_validate.validate(worker, KUBERNETES, strict=True)
    script = worker["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert f"prefect work-pool create {POOL} --type kubernetes" in script
    assert f"--base-job-template /templates/{POOL}.json" in script
    kustomization = yaml.safe_load((MULTI_NODE / "kustomization.yaml").read_text())
    assert kustomization["configMapGenerator"][0]["files"] == [f"{POOL}.json"]
    assert set(kustomization["resources"]) == {"worker.yaml", "service.yaml", "networkpolicy.yaml"}
