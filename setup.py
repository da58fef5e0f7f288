"""Builds the one C extension (64-bit atomics on shared mappings); pyproject.toml holds the rest."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rdmalog.rdma._atomic64",
            ["rdmalog/rdma/_atomic64.c"],
            extra_compile_args=["-O2"],
            optional=False,
        )
    ]
)
