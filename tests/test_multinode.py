"""Distributed cases across nodes, emulated on this machine: pod 0's runner coordinates the
world while a node agent (a second process, as on another pod) starts node 1's ranks, both
on loopback with gloo, torchrun-style (MASTER_ADDR, MASTER_PORT, NODE_RANK, NNODES). A
collective passes at 2 nodes x 2 ranks, every rank without the secrets both nodes'
environments hold; a rank of node 1 that writes a wrong result, crashes or hangs is recorded
against its case, naming its rank and node, while the others still report."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from kernelwatch.harness.distributed import trees
from kernelwatch.harness.distributed.nodes import Nodes
from kernelwatch.harness.distributed.ranks import Ranks
from kernelwatch.harness.isolation.supervise import CheckRequest, run_checks
from kernelwatch.harness.records import DeviceInfo, SoftwareInfo
from kernelwatch.harness.spec import World
from kernelwatch.harness.suite import SuiteRef, Task

PLANTED = Path(__file__).parent / "planted" / "multinode_ranks.py"
#: As the pods' kernelwatch-secrets would be (tests/planted/multinode_ranks.py's SECRET).
SECRETS = {
    "KERNELWATCH_DATABASE_URL": "postgresql://kw:hunter2-multinode@db/kw",
    "PREFECT_API_AUTH_STRING": "admin:hunter2-multinode",
}
AGENT = "kernelwatch.harness.distributed.agent"


def _two_free_ports() -> int:
    """A port p with p and p + 1 free (the rendezvous and the agents' port)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65534:
            with socket.socket() as other:
                try:
                    other.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two consecutive free ports")


def _layout(port: int, node: int) -> dict[str, str]:
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": str(node),
            "NNODES": "2"}  # fmt: skip


def test_a_world_of_two_nodes_checks_and_records_node_1s_failing_ranks(monkeypatch, tmp_path):
    port = _two_free_ports()
    for name, value in {**_layout(port, 0), **SECRETS}.items():
        monkeypatch.setenv(name, value)
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [sys.executable, "-m", AGENT],
        env={**os.environ, **_layout(port, 1)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        request = CheckRequest(suite=SuiteRef(str(PLANTED)), case_timeout_s=5)
        records = [(r.case.kernel, World.of(r.case.params).size, r) for r in run_checks(request)]
    finally:
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=30)
        log.close()
    got = {(kernel, size): r for kernel, size, r in records}
    assert [k[:2] for k in records] == [
        ("all_gather", 4), ("wrong_on_node1", 4), ("crashes_on_node1", 4), ("hangs_on_node1", 4)
    ], (tmp_path / "agent.log").read_text()[-3000:]  # fmt: skip
    # The gathered array is in global rank order: node 1's ranks are 2 and 3.
    passed = got["all_gather", 4]
    assert passed.verdict == "pass", (passed.reason, passed.detail)
    assert (passed.world.world_size, passed.world.nodes) == (4, 2)
    assert passed.world.interconnect == "loopback+network"
    assert [r.rank for r in passed.world.ranks] == [0, 1, 2, 3]
    wrong = got["wrong_on_node1", 4]
    assert wrong.verdict == "fail" and wrong.failed_ranks == (3,)
    assert wrong.reason.startswith("rank 3: 'out'")
    crashed = got["crashes_on_node1", 4]
    assert crashed.verdict == "error" and crashed.failed_ranks == (2,)
    assert crashed.reason == "rank 2 of 4 on node 1 died of signal SIGSEGV during launch"
    assert "Fatal Python error" in crashed.detail  # the remote rank's own stderr tail
    hung = got["hangs_on_node1", 4]
    assert hung.verdict == "error" and hung.failed_ranks == (3,)
    assert hung.reason.startswith("rank 3 (in launch, node 1) of 4 hung")
    assert code == 0  # SIGTERM: the agent killed its ranks and left


def test_the_agent_runs_the_flow_on_node_0_and_refuses_a_broken_layout(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("NNODES", "NODE_RANK")}
    flow = subprocess.run(
        [sys.executable, "-m", AGENT, "--", sys.executable, "-c", "print('flow run')"],
        env={**base, **_layout(29500, 0)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (flow.returncode, flow.stdout) == (0, "flow run\n")
    broken = subprocess.run(
        [sys.executable, "-m", AGENT],
        env={**base, **_layout(29500, 1), "NODE_RANK": "one"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert broken.returncode == 2
    assert broken.stderr.startswith("kernelwatch node agent: NODE_RANK='one' is not a whole")
    assert len(broken.stderr.splitlines()) == 1


def _coordinator(monkeypatch, port: int, startup_s: float) -> Ranks:
    for name, value in _layout(port, 0).items():
        monkeypatch.setenv(name, value)
    device = DeviceInfo(kind="cpu", name="cpu", host="h", interpreter=True)
    software = SoftwareInfo("0", "3", "2", "3", None, None)
    plan = {"seed": 0, "suite": SuiteRef(str(PLANTED)).to_json(), "case_timeout_s": 5,
            "startup_timeout_s": startup_s}  # fmt: skip
    return Ranks(plan, device, software, starting=lambda: None)


TASK = Task("all_gather", "smoke", {"gpus_per_node": 1, "nodes": 2, "n": 16}, "fp32", 1e-5)


def test_an_agent_that_goes_away_loses_its_ranks_and_an_impostor_is_refused(monkeypatch):
    """A fake agent: a connection claiming a node outside the world is closed; the real
    one receives the suite's directory and its rank's hello, then vanishes."""
    port = _two_free_ports()
    ranks = _coordinator(monkeypatch, port, startup_s=30)
    seen = {}

    def agent() -> None:
        def connect() -> socket.socket:
            while True:
                try:
                    return socket.create_connection(("127.0.0.1", port + 1))
                except ConnectionRefusedError:
                    time.sleep(0.05)

        with connect() as impostor:
            impostor.sendall(b'{"node": 7}\n')
            seen["impostor"] = impostor.makefile("rb").readline()
        with connect() as sock:
            stream = sock.makefile("rwb")
            stream.write(b'{"node": 1}\n')
            stream.flush()
            seen["start"] = json.loads(stream.readline())
            seen["hello"] = json.loads(stream.readline())

    thread = threading.Thread(target=agent)
    thread.start()
    record = ranks.run("check", TASK, "multinode_ranks")
    thread.join()
    ranks.close()
    assert seen["impostor"] == b""  # closed without a word
    assert seen["start"]["ranks"] == [1] and list(seen["start"]["trees"]) == [str(PLANTED.parent)]
    hello = seen["hello"]
    assert hello["rank"] == 1 and hello["message"]["rank"] == 1
    assert hello["message"]["local_rank"] == 0
    assert hello["message"]["init_method"] == f"tcp://127.0.0.1:{port}"
    assert record.verdict == "error" and record.failed_ranks == (1,)
    assert record.reason == (
        "rank 1 of 2 on node 1 was lost: the agent of node 1 went away during starting"
    )


def test_a_node_whose_agent_never_comes_is_named(monkeypatch):
    ranks = _coordinator(monkeypatch, _two_free_ports(), startup_s=0.5)
    record = ranks.run("check", TASK, "multinode_ranks")
    ranks.close()
    assert record.verdict == "error" and record.failed_ranks == (1,)
    assert record.reason.startswith("node 1 of 2 did not join: no node agent connected")


def test_the_layout_is_read_the_torchrun_way():
    nodes = Nodes.from_env(_layout(29500, 1))
    assert nodes == Nodes("127.0.0.1", 29500, 1, 2)
    assert (nodes.init_method, nodes.agent_port) == ("tcp://127.0.0.1:29500", 29501)
    assert Nodes.from_env({}) is None and Nodes.from_env({"NNODES": "1"}) is None
    with pytest.raises(ValueError, match="node rank must be below the node count"):
        Nodes.from_env(_layout(29500, 2))
    with pytest.raises(ValueError, match="MASTER_ADDR is not set"):
        Nodes.from_env({**_layout(29500, 1), "MASTER_ADDR": ""})


def test_a_runner_on_one_node_reports_a_multi_node_case_unsupported(monkeypatch):
    ranks = _coordinator(monkeypatch, 29500, startup_s=1)
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name)
    assert "multi-node cases run on a multi-node pool" in ranks.lacking(World(1, nodes=2))
    for name, value in {**_layout(29500, 0), "NNODES": "3"}.items():
        monkeypatch.setenv(name, value)
    assert ranks.lacking(World(1, nodes=2)) == "needs 2 nodes; this pool's Job has 3"
    assert ranks.lacking(World(1, nodes=3)) == ""


def test_checkouts_travel_to_the_other_nodes_and_hostile_trees_are_refused(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "src" / "pkg").mkdir(parents=True)
    (checkout / "src" / "pkg" / "suite.py").write_text("SUITE = None\n")
    (checkout / ".git").mkdir()
    (checkout / ".git" / "config").write_text("[core]\n")
    ref = SuiteRef(str(checkout / "src" / "pkg" / "suite.py"), str(checkout), "src", "abc123")
    packed = trees.pack({"suite": ref.to_json()})
    moved = trees.unpack(packed, tmp_path / "node1")
    local = trees.relocate(ref, moved)
    assert Path(local.target).read_text() == "SUITE = None\n"
    assert (local.src, local.revision) == ("src", "abc123")
    assert not (Path(local.root) / ".git").exists()
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.py")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(tarfile.OutsideDestinationError):
        trees.unpack({"/x": base64.b64encode(hostile.getvalue()).decode()}, tmp_path / "n2")
    assert not (tmp_path / "escaped.py").exists()


def test_the_ranks_see_the_layout_and_the_nccl_and_gloo_settings_but_no_secret(tmp_path):
    from kernelwatch.harness.isolation.sandbox import child_env

    settings = {"NCCL_ALGO": "Ring", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0",
                "GLOO_SOCKET_IFNAME": "eth0"}  # fmt: skip
    env = child_env({**_layout(29500, 1), **settings, **SECRETS}, tmp_path / "home")
    assert {**_layout(29500, 1), **settings}.items() <= env.items()
    assert not set(SECRETS) & set(env)
