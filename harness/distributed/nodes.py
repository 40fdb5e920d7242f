"""Where this process stands in a world that spans nodes, read the torchrun way from the
environment a multi-node pool's indexed Job gives every pod (infra/k8s/multi-node/):
``MASTER_ADDR`` (pod 0's stable DNS name), ``MASTER_PORT`` (torch.distributed's rendezvous,
which global rank 0 hosts), ``NODE_RANK`` (the pod's completion index) and ``NNODES``.

Pod 0 runs the flow and its kernel child, which coordinates every case's ranks; the node
agents of the other pods (``agent.py``) connect to it on ``MASTER_PORT + 1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The variables that place a process in a multi-node world; passed into the sandbox (they
#: are addresses, not secrets) so pod 0's kernel child knows the world it coordinates.
ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES")
#: The coordinator listens for the node agents one port above the rendezvous.
AGENT_PORT_OFFSET = 1


@dataclass(frozen=True)
class Nodes:
    """This pod's place among the nodes of its Job."""

    master_addr: str
    master_port: int
    node_rank: int
    nodes: int

    @property
    def agent_port(self) -> int:
        """The port pod 0's coordinator accepts the node agents on."""
        return self.master_port + AGENT_PORT_OFFSET

    @property
    def init_method(self) -> str:
        """torch.distributed's TCP rendezvous, hosted by global rank 0 on pod 0."""
        return f"tcp://{self.master_addr}:{self.master_port}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Nodes | None:
        """The layout ``environ`` declares; None on one node (``NNODES`` unset or 1).
        Raises ValueError naming a variable that is missing or malformed."""
        if not spans_nodes(environ):
            return None
        values = {}
        for name in ENV[1:]:
            try:
                values[name] = int(environ.get(name, ""))
            except ValueError:
                raise ValueError(
                    f"{name}={environ.get(name, '')!r} is not a whole number; a multi-node "
                    "pod needs MASTER_ADDR, MASTER_PORT, NODE_RANK and NNODES "
                    "(infra/k8s/multi-node/)"
                ) from None
        addr = environ.get("MASTER_ADDR", "")
        if not addr:
            raise ValueError("MASTER_ADDR is not set; a multi-node pod needs pod 0's name in it")
        nodes = cls(addr, values["MASTER_PORT"], values["NODE_RANK"], values["NNODES"])
        if not 0 <= nodes.node_rank < nodes.nodes or not 0 < nodes.master_port < 65535:
            raise ValueError(
                f"NODE_RANK={nodes.node_rank} with NNODES={nodes.nodes} and "
                f"MASTER_PORT={nodes.master_port}: the node rank must be below the node "
                "count and the port below 65535"
            )
        return nodes


def spans_nodes(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` declares more than one node (``NNODES`` set and not 1). Its
    children then keep the pod's network: their ranks reach the other nodes through it."""
    return environ.get("NNODES", "1").strip() not in ("", "1")
