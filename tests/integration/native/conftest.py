"""Fixtures of the native datapath tests: a real Store and an RdmaService in-process, on shm and
tcp."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.config import BrokerConfig
from rdmalog.rdma.broker.service import RdmaService
from rdmalog.store.log_manager import Store

KINDS = ["shm", "tcp"]


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def broker(tmp_path, kind):
    st = Store(Path(tmp_path), BrokerConfig.from_sources(None, {"log.dirs": str(tmp_path)}))
    st.open(start_maintenance=False)
    svc = RdmaService(st, kind, order_timeout=0.3).start()
    yield st, svc
    svc.stop()
    st.close()
