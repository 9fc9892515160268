"""Schemathesis fuzz of the whole OpenAPI schema against a real server: no 5xx, ever.

Runs the schemathesis CLI (its pytest plugin does not support the installed pytest 9) with the
examples and fuzzing phases (its coverage phase crashes inside hypothesis on Python 3.11 here) and
a small `--max-examples` so it fits CI; any 5xx or undocumented answer fails with schemathesis' report.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MAX_EXAMPLES = 15
# No 5xx, and every answer is one the schema documents (status, content type, body schema).
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_openapi_fuzz_has_no_server_errors(memory_server, tmp_path):
    cli = Path(sys.executable).with_name("schemathesis")
    command = [str(cli), "run", f"{memory_server.url}/openapi.json", "--checks", CHECKS,
               "--phases", "examples,fuzzing", "--max-examples", str(MAX_EXAMPLES), "--seed", "1",
               "--request-timeout", "60", "--workers", "2", "--no-color"]
    env = dict(os.environ, SCHEMATHESIS_HOOKS="", HYPOTHESIS_STORAGE_DIRECTORY=str(tmp_path))
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    report = result.stdout[-12000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    assert " passed" in result.stdout and "Runtime Error" not in result.stdout, report
