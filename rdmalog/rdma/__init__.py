"""KafkaDirect's RDMA datapaths: transports (verbs, shm, tcp), control, native producer/consumer.

Imports are lazy so that importing the store never requires the C extension or pyverbs.
"""

from __future__ import annotations

__all__ = [
    "BrokerDisconnected",
    "ClientClosedError",
    "Consumer",
    "Producer",
    "SaslCredentials",
    "open_device",
]


def __getattr__(name: str):
    if name == "Producer":
        from rdmalog.rdma.client.producer import Producer

        return Producer
    if name == "Consumer":
        from rdmalog.rdma.client.consumer import Consumer

        return Consumer
    if name in ("BrokerDisconnected", "ClientClosedError", "SaslCredentials"):
        from rdmalog.rdma.client import endpoint as client

        return getattr(client, name)
    if name == "open_device":
        from rdmalog.rdma.transport.devices import open_device

        return open_device
    raise AttributeError(name)
