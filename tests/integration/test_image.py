"""The container image's build, step by step, where no container builder runs.

The Dockerfile is read, not duplicated: its build stage's COPY lines decide what goes into
the build context, its ``pip install`` installs that into a fresh virtual environment (no
system or repository packages visible), its runtime COPY of ``policies`` and its
ENTRYPOINT, ENV and HEALTHCHECK are used as written. The installed ``specroute serve`` must
then serve the embedded fleet, from a directory outside the checkout.

One difference, for time: the Dockerfile installs with ``--no-cache-dir`` from the index;
here the dependencies come from a wheelhouse in ``.cache/image-wheels`` filled on the first
run (about 45 s) and reused after (about 10 s for the whole test).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / ".cache" / "image-wheels"


@dataclass
class Stage:
    workdir: str = "/"
    copies: list[tuple[list[str], str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    healthcheck: str = ""


def read_dockerfile(path: Path) -> list[Stage]:
    """The instructions this test replays, per stage (no line continuations in ours)."""
    stages: list[Stage] = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        if op == "FROM":
            stages.append(Stage())
        elif op == "WORKDIR":
            stages[-1].workdir = rest
        elif op == "COPY" and not rest.startswith("--from"):
            *sources, dest = rest.split()
            stages[-1].copies.append((sources, dest))
        elif op == "RUN":
            stages[-1].runs.append(rest)
        elif op == "ENV":
            stages[-1].env.update(pair.split("=", 1) for pair in shlex.split(rest))
        elif op == "ENTRYPOINT":
            stages[-1].entrypoint = json.loads(rest)
        elif op == "HEALTHCHECK":
            stages[-1].healthcheck = rest.split(" CMD ", 1)[1]
    return stages


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nice", sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def install(context: Path, venv: Path) -> None:
    """The Dockerfile's ``pip install .`` into ``venv``, dependencies from the wheelhouse."""
    offline = ("--python", str(venv / "bin/python"), "install", "-q", "--no-index")
    if pip(*offline, "--find-links", str(WHEELS), str(context)).returncode == 0:
        return
    # First run, or the dependencies changed: fill the wheelhouse, build requirements too.
    build = tomllib.loads((context / "pyproject.toml").read_text())["build-system"]["requires"]
    for step in (
        ("wheel", "-q", "--wheel-dir", str(WHEELS), str(context)),
        ("download", "-q", "-d", str(WHEELS), *build),
    ):
        result = pip(*step)
        assert result.returncode == 0, result.stderr
    for built in WHEELS.glob("specroute-*.whl"):
        built.unlink()
    result = pip(*offline, "--find-links", str(WHEELS), str(context))
    assert result.returncode == 0, result.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Stage, Path]:
    """(the image's installed environment, its runtime stage, its /etc/specroute/policies)."""
    build, runtime = read_dockerfile(REPO / "Dockerfile")
    root = tmp_path_factory.mktemp("image")
    context = root / "src"
    for sources, dest in build.copies:
        target = context / dest
        for source in sources:
            src = REPO / source
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target / src.name)
    [install_step] = [r for r in build.runs if r.startswith("pip install")]
    assert install_step.split()[-1] == "."
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install(context, venv)
    [(sources, policies_dest)] = runtime.copies
    policies = root / "etc" / Path(policies_dest).name
    shutil.copytree(REPO / sources[0], policies)
    return venv, runtime, policies


def test_the_image_serves_the_embedded_fleet(image: tuple[Path, Stage, Path]) -> None:
    venv, runtime, policies = image
    # The shipped policies are valid with the installed package alone.
    files = sorted(str(p) for p in policies.glob("*.yaml"))
    checked = subprocess.run(
        [str(venv / "bin/specroute"), "policy", "validate", *files],
        capture_output=True,
        text=True,
        cwd=policies,
    )
    assert checked.returncode == 0, checked.stderr
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "SPECROUTE_", "VIRTUAL_ENV"))
    }
    env |= runtime.env | {"SPECROUTE_HOST": "127.0.0.1", "SPECROUTE_PORT": str(port)}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    assert runtime.entrypoint == ["specroute", "serve"]
    server = subprocess.Popen(
        runtime.entrypoint,
        env=env,
        cwd=policies.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the image's entrypoint did not come up in 30 s"
            time.sleep(0.2)
        client = OpenAI(base_url=base + "/v1", api_key="unused")
        reply = client.chat.completions.with_raw_response.create(
            model="sim-llama-8b", messages=[{"role": "user", "content": "Hello!"}], max_tokens=8
        )
        assert reply.headers["x-specroute-route"].startswith("pool=")
        assert reply.parse().choices[0].message.content
        assert httpx.get(base + "/ready", timeout=5).status_code == 200
        # The image's HEALTHCHECK command, pointed at this port.
        probe = runtime.healthcheck.replace("8080", str(port))
        assert subprocess.run(shlex.split(probe), env=env, timeout=10).returncode == 0
        # The installed package runs from the environment, not from this checkout.
        where = subprocess.run(
            ["python", "-c", "import proxy; print(proxy.__file__)"],
            env=env,
            cwd=policies.parent,
            capture_output=True,
            text=True,
            check=True,
        )
        assert where.stdout.startswith(str(venv))
    finally:
        server.terminate()
        server.wait(timeout=15)
