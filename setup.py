"""Builds the C extensions (64-bit atomics on shared mappings; the log cleaner's offset map and record
filter, which hashes keys with OpenSSL's MD5 as Kafka does; the store's batch check and its
record-level checks; the native clients' batch codec); pyproject.toml holds the rest."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rdmalog.rdma.transport._atomic64",
            ["rdmalog/rdma/transport/_atomic64.c"],
            depends=["rdmalog/rdma/transport/_atomic64_api.h"],
            extra_compile_args=["-O2"],
            optional=False,
        ),
        Extension(
            "rdmalog.store._cleaner",
            ["rdmalog/store/_cleaner.c"],
            depends=["rdmalog/store/_cleaner_records.h"],
            extra_compile_args=["-O2"],
            libraries=["crypto"],
            optional=False,
        ),
        Extension(  # optional: rdmalog/store/records.py falls back to Python without it
            "rdmalog.store._records",
            ["rdmalog/store/_records.c"],
            depends=["rdmalog/store/crc32c.h", "rdmalog/store/record_scan.h"],
            extra_compile_args=["-O2"],
            libraries=["z"],  # gzip batches inflated as their records are checked
            optional=True,
        ),
        Extension(  # the record checks of every produced batch (records.check_records)
            "rdmalog.store._record_scan",
            ["rdmalog/store/_record_scan.c"],
            depends=["rdmalog/store/record_scan.h"],
            extra_compile_args=["-O2"],
            optional=False,
        ),
        Extension(  # optional: rdmalog/rdma/client/consumer.py falls back to Python without it
            "rdmalog.rdma.client._batch",
            ["rdmalog/rdma/client/_batch.c", "rdmalog/rdma/client/_lazy_records.c"],
            depends=[
                "rdmalog/store/crc32c.h",
                "rdmalog/rdma/transport/_atomic64_api.h",
                "rdmalog/rdma/client/_record_fields.h",
                "rdmalog/rdma/client/_lazy_records.h",
            ],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
