"""Builds the C extensions (64-bit atomics on shared mappings; the log cleaner's offset map and record
filter, which hashes keys with OpenSSL's MD5 as Kafka does; the store's batch check and its
record-level checks, linking zlib and, when found, liblz4, libzstd, libsnappy and libdeflate; the
native clients' batch codec); pyproject.toml holds the rest."""

import os
import subprocess
import sysconfig

from setuptools import Extension, setup


def _links(header: str, lib: str, call: str) -> bool:
    """Whether a C program including `header` and calling `call` links against -l`lib` here."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    code = f"#include <stddef.h>\n#include <{header}>\nint main(void) {{ return (int)(size_t){call}; }}\n"
    try:
        done = subprocess.run(
            [*cc, "-x", "c", "-", "-o", os.devnull, f"-l{lib}"],
            input=code.encode(), capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# lz4, zstd and snappy batches are checked in the one C call when Debian's libraries are here
# (liblz4-dev, libzstd-dev, libsnappy-dev; scripts/setup.sh installs them, and libdeflate-dev);
# without one, that codec's records go through the Python libraries (records._C_CHECKED says which).
_CODEC_LIBS = [
    (name, lib)
    for name, header, lib, call in [
        ("HAVE_LZ4", "lz4frame.h", "lz4", "LZ4F_getVersion()"),
        ("HAVE_ZSTD", "zstd.h", "zstd", "ZSTD_versionNumber()"),
        ("HAVE_SNAPPY", "snappy-c.h", "snappy", "snappy_max_compressed_length(1)"),
        # gzip's common form inflates through libdeflate when here (zlib checks the rest)
        ("HAVE_LIBDEFLATE", "libdeflate.h", "deflate", "libdeflate_alloc_decompressor()"),
    ]
    if _links(header, lib, call)
]

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
            depends=[
                "rdmalog/store/crc32c.h",
                "rdmalog/store/record_scan.h",
                "rdmalog/store/record_codecs.h",
            ],
            extra_compile_args=["-O2"],
            libraries=["z", *(lib for _, lib in _CODEC_LIBS)],  # batches inflated as checked
            define_macros=[(name, "1") for name, _ in _CODEC_LIBS],
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
