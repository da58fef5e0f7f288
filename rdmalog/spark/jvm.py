"""The JVM reader (`rdmalog/spark/java/`, Java): building its jar and finding it.

The jar is compiled with the JDK's `javac` against the jars of the installed pyspark wheel (no
Maven), into `rdmalog/spark/java/build/`. `scripts/setup.sh` builds it; `jar()` builds it when it
is missing or older than its sources. Put it on Spark's classpath before the JVM starts:

    SparkSession.builder.config("spark.jars", str(rdmalog.spark.jvm.jar()))

Then `format("rdmalog")` is the JVM reader for reads over the native tcp datapath (see
docs/spark.md); `rdmalog.spark.register(spark)` registers the Python source under another name
for everything else.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "java"
BUILD = SOURCES / "build"
JAR = BUILD / "rdmalog-spark.jar"
PROVIDER = "io.rdmalog.spark.RdmalogProvider"
PYTHON_NAME = "rdmalog-python"  # the Python source's name when the JVM reader is `rdmalog`


class BuildError(RuntimeError):
    """The jar could not be built (javac or jar refused the sources)."""


class Unavailable(BuildError):
    """The jar cannot be built on this machine: no JDK, or no pyspark with its jars."""


def _pyspark_jars() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise Unavailable(f"pyspark is not installed: {exc}") from None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        raise Unavailable(f"pyspark has no jars directory at {jars}")
    return jars


def _inputs() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file() and BUILD not in p.parents)


def _stamp() -> str:
    """Hash of the sources and the pyspark version the jar is compiled against."""
    import pyspark

    h = hashlib.sha256(pyspark.__version__.encode())
    for p in _inputs():
        h.update(str(p.relative_to(SOURCES)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise Unavailable(
            f"`{name}` is not on PATH: the JVM reader needs a JDK 17 "
            "(Debian: apt-get install openjdk-17-jdk-headless)"
        )
    return path


def build(force: bool = False) -> Path:
    """Compile the sources against pyspark's jars into JAR (unless it is up to date)."""
    pyspark_jars = _pyspark_jars()  # first: _stamp() needs pyspark
    stamp = _stamp()
    stamp_file = BUILD / "sources.sha256"
    if not force and JAR.is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return JAR
    javac, jar_tool = _tool("javac"), _tool("jar")
    classpath = str(pyspark_jars / "*")
    java_files = [str(p) for p in _inputs() if p.suffix == ".java"]
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "--release", "17", "-encoding", "UTF-8", "-Xlint:all,-path,-serial"]
        cmd += ["-Werror", "-cp", classpath, "-d", str(classes), *java_files]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"javac failed:\n{done.stdout}{done.stderr}")
        shutil.copytree(SOURCES / "META-INF", classes / "META-INF")
        tmp_jar = Path(tmp) / JAR.name
        done = subprocess.run(
            [jar_tool, "--create", "--file", str(tmp_jar), "-C", str(classes), "."],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise BuildError(f"jar failed:\n{done.stdout}{done.stderr}")
        tmp_jar.replace(JAR)
    stamp_file.write_text(stamp)
    return JAR


def jar() -> Path:
    """The built jar (built now if it is missing or stale)."""
    return build()


def loaded(spark) -> bool:  # spark: SparkSession
    """True when the JVM reader is on this session's classpath (`spark.jars` had the jar)."""
    jvm = getattr(spark, "_jvm", None) or getattr(
        getattr(spark, "sparkContext", None), "_jvm", None
    )
    if jvm is None:  # e.g. Spark Connect: no py4j gateway to ask
        return False
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(PROVIDER))


def main(argv: list[str] | None = None) -> int:
    """`python -m rdmalog.spark.jvm [--force]`: build the jar and print its path."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        print(build(force="--force" in argv))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
