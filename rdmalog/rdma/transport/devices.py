"""Open a transport by name: the one place that knows the three implementations.

`interface.py` defines what every transport offers and imports none of them; each implementation
imports the interface; this module imports the implementations (lazily: `verbs` needs pyverbs,
`shm` the C extension), so the graph has no cycle.
"""

from __future__ import annotations

from rdmalog.rdma.transport.interface import Device


def open_device(kind: str, **kwargs) -> Device:
    """Create the transport endpoint named `kind`: "shm", "tcp" or "verbs"."""
    if kind == "shm":
        from rdmalog.rdma.transport.shm import ShmDevice

        return ShmDevice(**kwargs)
    if kind == "tcp":
        from rdmalog.rdma.transport.tcp import TcpDevice

        return TcpDevice(**kwargs)
    if kind == "verbs":
        from rdmalog.rdma.transport.verbs import VerbsDevice

        return VerbsDevice(**kwargs)
    raise ValueError(f"unknown transport {kind!r}")
