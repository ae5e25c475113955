"""Upstream test sources: the sdists of the *installed* kombu and Celery, from the registry.

``fetch("kombu")`` downloads ``kombu==<installed version>`` as a source distribution with
pip (the registry pip is configured for), unpacks it once into a cache directory outside
the repository and returns the unpacked tree. Nothing of it is ever committed.

The cache is ``$ALKSTORE_UPSTREAM_CACHE``, else ``~/.cache/kombu-alkstore/upstream``.
A failed download raises :class:`FetchError` with pip's output: the suites that need the
sources fail loudly, they never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version as installed_version
from pathlib import Path


class FetchError(RuntimeError):
    """The upstream sdist could not be downloaded or unpacked."""


def cache_dir() -> Path:
    env = os.environ.get("ALKSTORE_UPSTREAM_CACHE")
    path = Path(env) if env else Path.home() / ".cache" / "kombu-alkstore" / "upstream"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(path: Path):
    """One fetch at a time per cache (parallel runs of the suite share it)."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fetch(name: str, version: str | None = None) -> Path:
    """The unpacked sdist of ``name`` at ``version`` (default: the installed version)."""
    version = version or installed_version(name)
    root = cache_dir()
    target = root / f"{name}-{version}"
    marker = target / ".alkstore-complete"
    if marker.exists():
        return target
    with _locked(root / f".{name}-{version}.lock"):
        if marker.exists():
            return target
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            archive = _download(name, version, Path(tmp))
            unpacked = _unpack(archive, Path(tmp) / "unpacked")
            if target.exists():
                shutil.rmtree(target)  # a half-made tree from an interrupted run
            unpacked.rename(target)
        marker.write_text(f"{name}=={version}\n")
    return target


def _download(name: str, version: str, dest: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "-d", str(dest), f"{name}=={version}",
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        raise FetchError(f"{' '.join(cmd)} timed out after 600 s: registry unreachable?") from exc
    archives = sorted(dest.glob("*.tar.gz"))
    if proc.returncode != 0 or not archives:
        raise FetchError(
            f"could not download the {name}=={version} sdist from the package registry "
            f"(exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return archives[0]


def _unpack(archive: Path, dest: Path) -> Path:
    dest.mkdir()
    with tarfile.open(archive) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(dest, filter="data")
        else:  # the data filter arrived in 3.12; refuse unsafe members by hand
            for member in tar.getmembers():
                if member.name.startswith(("/", "..")) or ".." in Path(member.name).parts:
                    raise FetchError(f"unsafe path in {archive.name}: {member.name}")
                if member.issym() or member.islnk():
                    raise FetchError(f"link in {archive.name}: {member.name}")
            tar.extractall(dest)
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise FetchError(f"{archive.name} does not hold one top directory: {tops}")
    return tops[0]
