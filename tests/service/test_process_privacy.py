"""A service process can mark itself non-dumpable (the server, the GP workers and the batch worker do at start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_forbid_inspection_makes_the_process_non_dumpable():
    code = (
        "from service.process_privacy import forbid_inspection, inspectable\n"
        "before = inspectable()\nok = forbid_inspection()\nprint(before, ok, inspectable())"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True", "False"], done
