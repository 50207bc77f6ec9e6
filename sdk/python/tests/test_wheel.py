"""The package builds into a wheel that installs offline into a fresh venv."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

SDK = pathlib.Path(__file__).resolve().parent.parent


def test_the_wheel_builds_and_installs_offline_into_a_fresh_venv(tmp_path: pathlib.Path) -> None:
    # pip builds a local directory in place: build a copy, so the source
    # tree gets no build/ or egg-info.
    source = tmp_path / "source"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "tests"))
    # Nothing of the source tree on the path: the venv must find the wheel's copy.
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_FIND_LINKS")}
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist),
         str(source)], capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert build.returncode == 0, build.stdout + build.stderr
    wheels = list(dist.glob("kruntimes-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    # --system-site-packages: kubernetes comes from Debian's python3-kubernetes.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, env=clean)
    py = venv / "bin" / "python"
    install = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-deps", str(wheels[0])],
                             capture_output=True, text=True, env=clean)
    assert install.returncode == 0, install.stdout + install.stderr
    probe = subprocess.run(
        [str(py), "-c", "import kruntimes, kruntimes.aio, pathlib; "
         "print(pathlib.Path(kruntimes.__file__).parent); print(kruntimes.__version__)"],
        capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert probe.returncode == 0, probe.stderr
    where, version = probe.stdout.split()
    assert where.startswith(str(venv)), f"imported from the venv, not the source tree: {where}"
    assert version == "0.1.0"
    assert (pathlib.Path(where) / "py.typed").exists(), "typed: py.typed is installed"
