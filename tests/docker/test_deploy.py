"""Deployment files: the compose stack validates against the Compose Specification (Docker
Compose's own parser) and runs its containers hardened (fixed non-root uid, read-only root
filesystem with tmpfs/volumes where the service writes, no capabilities, no-new-privileges), the
Dockerfile passes hadolint and keeps its contract (pinned bases, non-root, /readyz health check,
the api command), .dockerignore keeps secrets and data out of the
build context, and .env.example documents every variable with the service's own setting names.
The commands the containers run are exercised against real Redis in test_container_commands.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from service.jobs.settings import JobSettings
from service.settings import Settings
from tests.docker.deploy_files import (
    COMPOSE,
    COMPOSE_CPU,
    ENV_EXAMPLE,
    NO_NEW_PRIVILEGES,
    REPO,
    SERVICE_UID,
    TEST_KEYS,
    compose_config,
    compose_variables,
    dockerfile_instructions,
    dockerignored,
    env_example_names,
    env_text,
    hardening_problems,
    resolved,
    tool,
)

SERVICE_SETTINGS = {f"GRIDPFN_{name.upper()}" for name in (*Settings.model_fields, *JobSettings.model_fields)}
GPU_DEVICE = {"driver": "nvidia", "capabilities": ["gpu"]}


def seconds(duration: str) -> float:
    """Compose's normalised durations ('3m0s', '15s', '1m30s') in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts, duration
    return sum(float(value) * units[unit] for value, unit in parts)


@pytest.fixture(scope="module")
def gpu_stack(tmp_path_factory) -> dict:
    return resolved(tmp_path_factory.mktemp("gpu-stack"))


@pytest.fixture(scope="module")
def cpu_stack(tmp_path_factory) -> dict:
    return resolved(tmp_path_factory.mktemp("cpu-stack"), COMPOSE, COMPOSE_CPU)


# ---- docker-compose.yml -------------------------------------------------------------------------


def test_compose_stack_is_valid_and_complete(gpu_stack):
    services = gpu_stack["services"]
    assert set(services) == {"api", "worker", "redis"}
    api, worker = services["api"], services["worker"]
    assert api["command"] == ["gridpfn", "serve", "--host", "0.0.0.0", "--port", "8000"]
    assert worker["command"] == ["gridpfn", "worker"]
    assert api["image"] == worker["image"] and api["build"] == worker["build"]
    assert api["build"]["dockerfile"] == "docker/Dockerfile" and api["build"]["args"]["VARIANT"] == "gpu"
    for service in (api, worker):
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and GPU_DEVICE.items() <= devices[0].items(), devices
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        env = service["environment"]
        assert env["GRIDPFN_REDIS_URL"].startswith("redis://redis:")
        assert env["GRIDPFN_API_KEYS"] == TEST_KEYS
        assert env["GRIDPFN_DEVICE"] == "cuda"
        jobs = [v for v in service["volumes"] if v["target"] == env["GRIDPFN_JOBS_DIR"]]
        assert jobs and jobs[0]["type"] == "volume", "api and workers must share the jobs directory"
        health = service["healthcheck"]
        assert seconds(health["start_period"]) >= 120, "start_period must cover model loading and warm-up"
        assert health["test"][0] == "CMD"
    assert api["healthcheck"]["test"] == ["CMD", "python", "/opt/gridpfn/healthcheck.py", "api"]
    assert worker["healthcheck"]["test"] == ["CMD", "python", "/opt/gridpfn/healthcheck.py", "worker"]
    # --scale worker=N needs a worker with no fixed name and no host port
    assert "container_name" not in worker and "ports" not in worker
    assert [p["target"] for p in api["ports"]] == [8000]


def test_redis_is_durable_and_never_evicts(gpu_stack):
    redis = gpu_stack["services"]["redis"]
    command = redis["command"]
    flags = dict(zip(command[1::2], command[2::2]))
    assert command[0] == "redis-server"
    assert flags["--appendonly"] == "yes" and flags["--appendfsync"] == "everysec"
    assert flags["--maxmemory-policy"] == "noeviction" and flags["--maxmemory"]
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert re.fullmatch(r"redis:\d+\.\d+\.\d+(-\w+)?", redis["image"]), "pin the Redis image tag"
    (data,) = [v for v in redis["volumes"] if v["target"] == "/data"]
    assert data["type"] == "volume" and data["source"] in gpu_stack["volumes"]
    assert "ports" not in redis, "Redis stays on the stack's private network"


def test_cpu_override_drops_the_gpu(cpu_stack):
    for name in ("api", "worker"):
        service = cpu_stack["services"][name]
        assert "deploy" not in service or "devices" not in str(service["deploy"]), service.get("deploy")
        assert service["build"]["args"]["VARIANT"] == "cpu"
        assert service["environment"]["GRIDPFN_DEVICE"] == "cpu"
        assert service["image"] == cpu_stack["services"]["api"]["image"] != "gridpfn:gpu"


def test_containers_run_unprivileged_on_a_read_only_root(gpu_stack, cpu_stack):
    for stack in (gpu_stack, cpu_stack):
        for name in ("api", "worker"):
            assert hardening_problems(stack["services"][name]) == [], name
        assert NO_NEW_PRIVILEGES in stack["services"]["redis"]["security_opt"]


@pytest.mark.parametrize(
    "secure, weakened, problem",
    [
        ("read_only: true", "read_only: false", "read_only"),
        ("cap_drop: [ALL]", "cap_drop: [NET_RAW]", "capabilities"),
        ('security_opt: ["no-new-privileges:true"]', "security_opt: []", NO_NEW_PRIVILEGES),
        (f'user: "{SERVICE_UID}:{SERVICE_UID}"', 'user: "0:0"', "user"),
        ("- /tmp:mode=1777", "- /var/tmp:mode=1777", "/tmp is not a tmpfs"),
        ("GRIDPFN_JOBS_DIR: /var/lib/gridpfn/jobs", "GRIDPFN_JOBS_DIR: /srv/jobs", "GRIDPFN_JOBS_DIR=/srv/jobs"),
    ],
    ids=["read_only", "cap_drop", "no-new-privileges", "user", "tmpfs", "jobs-dir"],
)
def test_hardening_check_sees_each_property_weakened(tmp_path, secure, weakened, problem):
    """The check above is real: the stack with one property weakened is valid compose, and reported."""
    text = COMPOSE.read_text()
    assert secure in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(secure, weakened, 1))
    result = compose_config(tmp_path, broken, env=env_text())
    assert result.returncode == 0, result.stderr
    found = hardening_problems(json.loads(result.stdout)["services"]["api"])
    assert any(problem in p for p in found), found


def test_compose_refuses_to_start_without_api_keys(tmp_path):
    result = compose_config(tmp_path, env=ENV_EXAMPLE.read_text())
    assert result.returncode != 0
    assert "GRIDPFN_API_KEYS" in result.stderr


def test_compose_rejects_what_the_specification_forbids(tmp_path):
    """The validation is real: a misspelt key fails (so the passing tests above mean something)."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("start_period:", "start_perod:", 1))
    result = compose_config(tmp_path, broken, env=env_text())
    assert result.returncode != 0 and "start_perod" in result.stderr


def test_documented_model_mount_override(tmp_path):
    """The README's override for serving other checkpoints merges into a valid stack."""
    override = tmp_path / "docker-compose.override.yml"
    override.write_text(
        "services:\n"
        "  api: &models\n"
        '    volumes: ["/srv/gridpfn-models:/models:ro"]\n'
        "    environment: {GRIDPFN_MODEL_DIR: /models}\n"
        "  worker: *models\n"
    )
    config = resolved(tmp_path, COMPOSE, override)
    for name in ("api", "worker"):
        service = config["services"][name]
        assert service["environment"]["GRIDPFN_MODEL_DIR"] == "/models"
        targets = {v["target"]: v for v in service["volumes"]}
        assert targets["/models"]["read_only"] and "/var/lib/gridpfn/jobs" in targets


# ---- .env.example --------------------------------------------------------------------------------


def test_env_example_names_every_compose_variable():
    used = compose_variables(COMPOSE, COMPOSE_CPU)
    assert "GRIDPFN_API_KEYS" in used
    missing = used - env_example_names()
    assert not missing, f".env.example does not document {sorted(missing)}"


def test_env_example_uses_the_service_setting_names(gpu_stack):
    documented = {n for n in env_example_names() if n.startswith("GRIDPFN_")}
    unknown = documented - SERVICE_SETTINGS
    assert not unknown, f".env.example names settings the service does not read: {sorted(unknown)}"
    for name in ("api", "worker"):
        set_by_compose = {k for k in gpu_stack["services"][name]["environment"] if k.startswith("GRIDPFN_")}
        assert set_by_compose <= SERVICE_SETTINGS, sorted(set_by_compose - SERVICE_SETTINGS)


def test_env_example_values_are_valid_settings(monkeypatch):
    """Every documented line, uncommented, is accepted by the service's settings classes."""
    for name in [n for n in list(os.environ) if n.startswith("GRIDPFN_")]:
        monkeypatch.delenv(name)
    for line in env_text().splitlines():
        match = re.match(r"^#?\s*(GRIDPFN_[A-Z0-9_]+)=(.*)$", line)
        if match and match.group(2):
            monkeypatch.setenv(match.group(1), match.group(2))
    settings, jobs = Settings(), JobSettings()
    assert settings.api_keys == tuple(TEST_KEYS.split(","))
    assert str(settings.model_dir) == "/opt/gridpfn/models" and jobs.job_chunk_rows >= 1


# ---- docker/Dockerfile and .dockerignore ----------------------------------------------------------


@pytest.mark.parametrize("dockerfile", sorted((REPO / "docker").glob("Dockerfile*")), ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile: Path):
    result = subprocess.run(
        [tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_contract(gpu_stack):
    steps = dockerfile_instructions()
    args: dict[str, str] = {}  # ARG defaults, the global ones (before the first FROM) first
    for keyword, rest in steps:
        if keyword == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args.setdefault(key, value)
    stages, bases = set(), []
    for keyword, rest in steps:
        if keyword == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), words[0])
            bases.append(image)
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
    assert len(bases) >= 2, "multi-stage build expected"
    external = [b for b in bases if not b.startswith("runtime-") and b not in stages]
    for image in external + [args["CUDA_IMAGE"], args["UBUNTU_IMAGE"]]:
        name, _, tag = image.partition(":")
        assert tag and tag != "latest" and re.search(r"\d", tag), f"unpinned base image {image}"
    assert args["CUDA_IMAGE"].startswith("nvidia/cuda:") and args["VARIANT"] == "gpu"
    assert {"runtime-gpu", "runtime-cpu"} <= stages

    final = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}, "the runtime stage must not run as root"
    health = [rest for keyword, rest in final if keyword == "HEALTHCHECK"]
    assert health and '"/opt/gridpfn/healthcheck.py", "api"' in health[-1] and "--start-period" in health[-1]
    copies = [rest.split() for keyword, rest in final if keyword == "COPY"]
    assert ["docker/healthcheck.py", "/opt/gridpfn/healthcheck.py"] in copies
    cmd = [rest for keyword, rest in final if keyword == "CMD"][-1]
    assert json.loads(cmd) == gpu_stack["services"]["api"]["command"]
    env = " ".join(rest for keyword, rest in final if keyword == "ENV")
    assert "GRIDPFN_MODEL_DIR=/opt/gridpfn/models" in env
    runs = " ".join(rest for keyword, rest in steps if keyword == "RUN")
    assert "TORCH_CPU_INDEX" in args and '--index-url "${TORCH_CPU_INDEX}"' in runs, "VARIANT=cpu: the CPU wheel"


def test_image_runs_as_the_fixed_uid_compose_names(gpu_stack):
    steps = dockerfile_instructions()
    final = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users[-1] == f"{SERVICE_UID}:{SERVICE_UID}" == gpu_stack["services"]["api"]["user"]
    runs = " ".join(rest for keyword, rest in final if keyword == "RUN")
    assert re.search(rf"groupadd [^&;]*--gid {SERVICE_UID} ", runs), "the group needs the fixed gid"
    assert re.search(rf"useradd [^&;]*--uid {SERVICE_UID} [^&;]*--gid {SERVICE_UID} ", runs), (
        "the user needs the fixed uid"
    )
    # the jobs directory exists owned by that user, so a fresh named volume mounted on it inherits the owner
    jobs_dir = gpu_stack["services"]["api"]["environment"]["GRIDPFN_JOBS_DIR"]
    assert f"install -d -o {SERVICE_UID} -g {SERVICE_UID} {jobs_dir}" in runs
    env = " ".join(rest for keyword, rest in final if keyword == "ENV")
    assert f"GRIDPFN_JOBS_DIR={jobs_dir}" in env


def test_build_context_has_what_the_image_copies_and_nothing_secret():
    for keyword, rest in dockerfile_instructions():
        if keyword != "COPY" or "--from=" in rest:
            continue
        for source in rest.split()[:-1]:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert not dockerignored(source), f"COPY {source}: excluded by .dockerignore"
    for kept in (
        "pyproject.toml",
        "README.md",
        "gridsim/api.py",
        "service/commands/cli.py",
        "models/registry/a/1/card.json",
        "models/registry/a/1/model.safetensors",
        "models/configs/x.json",
    ):
        assert not dockerignored(kept), kept
    for dropped in (
        ".env",
        ".venv/bin/python",
        "runs/ieee33/ckpt.pt",
        "tests/conftest.py",
        ".git/HEAD",
        "models/__pycache__/a.cpython-311.pyc",
        ".pytest_cache/v",
        "data/x.parquet",
        "scenarios.parquet",
        "gridpfn.egg-info/PKG-INFO",
        ".hypothesis/examples/x",
        "service/x.csv",
    ):
        assert dockerignored(dropped), dropped


def test_dockerignore_matcher_follows_docker_rules():
    """The matcher the test above relies on: last match wins, parents count, `**` spans directories."""
    patterns = ["*", "!src/", "**/*.pyc", "!src/keep.pyc", "docs"]
    assert dockerignored("top.txt", patterns)
    assert not dockerignored("src/a/b.py", patterns)
    assert dockerignored("src/a/b.pyc", patterns) and not dockerignored("src/keep.pyc", patterns)
    assert dockerignored("docs/x/y.md", patterns)


def test_scale_out_host_uses_shared_redis_and_shared_jobs_dir(tmp_path):
    """A second host of a scaled-out deployment: one shared Redis, one shared jobs filesystem."""
    shared = "rediss://:secret@redis.internal.example:6380/0"
    env = env_text() + f"\nGRIDPFN_REDIS_URL={shared}\nDEPLOY_JOBS_VOLUME=/mnt/shared/gridpfn-jobs\n"
    result = compose_config(tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    for name in ("api", "worker"):
        service = config["services"][name]
        assert service["environment"]["GRIDPFN_REDIS_URL"] == shared
        (jobs,) = [v for v in service["volumes"] if v["target"] == "/var/lib/gridpfn/jobs"]
        assert jobs["type"] == "bind" and jobs["source"] == "/mnt/shared/gridpfn-jobs"
