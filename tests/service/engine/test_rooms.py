"""The rooms of service/: the engine speaks no HTTP, and each room imports only what it may."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[3] / "service"
WEB_FRAMEWORKS = ("starlette", "fastapi")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def offending(room: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = {}
    for path in sorted((SERVICE / room).rglob("*.py")):
        hits = sorted(m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in forbidden))
        if hits:
            bad[str(path.relative_to(SERVICE))] = hits
    return bad


def test_the_engine_imports_no_web_framework():
    assert list((SERVICE / "engine").glob("*.py")), "service/engine is empty?"
    assert offending("engine", WEB_FRAMEWORKS) == {}


def test_the_engine_and_the_jobs_do_not_reach_into_the_http_layer_or_the_commands():
    assert offending("engine", ("service.http", "service.commands", "service.jobs")) == {}
    assert offending("jobs", ("service.http", "service.commands", *WEB_FRAMEWORKS)) == {}


def test_the_scan_sees_imports_inside_functions(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from starlette.responses import Response\n    import fastapi.routing\n")
    assert imported_modules(sample) == {"starlette.responses", "fastapi.routing"}
