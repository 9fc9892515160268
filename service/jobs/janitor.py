"""Remove job directories whose record is gone (expired in Redis, or lost with an embedded server).

Job records expire after `job_ttl_s`; their files would otherwise stay on the shared disk forever.
A directory is only removed when it has no record *and* has not changed for `max_age_s`, so a job
still being uploaded (files first, record last) is never touched.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from pathlib import Path

from service.jobs.states import JobStates

log = logging.getLogger(__name__)
_JOB_DIR = re.compile(r"[0-9a-f]{32}")


def sweep(root: Path, states: JobStates, max_age_s: float, now: float | None = None) -> list[str]:
    """Delete orphaned job directories under root; returns their ids."""
    now = time.time() if now is None else now
    removed = []
    if not Path(root).is_dir():
        return removed
    for directory in Path(root).iterdir():
        if not directory.is_dir() or not _JOB_DIR.fullmatch(directory.name):
            continue
        if now - directory.stat().st_mtime < max_age_s or states.get(directory.name) is not None:
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory.name)
    if removed:
        log.info("removed %d orphaned job directories under %s", len(removed), root)
    return removed
