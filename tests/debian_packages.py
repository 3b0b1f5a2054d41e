"""Debian packages a test needs, installed when one of their programs is missing: the tests run as root here and in
CI, where the repository's own files must install what its tests use; elsewhere the error names the packages."""

import os
import shutil
import subprocess
from pathlib import Path


def ensure_debian_packages(binaries: tuple[str, ...], packages: tuple[str, ...], needed_by: str) -> None:
    """Install ``packages`` when a program of ``binaries`` is missing (idempotent: nothing runs when all are there)."""
    missing = [binary for binary in binaries if shutil.which(binary) is None
               and not Path("/usr/sbin", binary).exists()]
    if not missing:
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"{needed_by} needs {', '.join(missing)} (Debian packages {' '.join(packages)}); "
                           "installing them needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], check=True, env=env)
