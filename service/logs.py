"""One logging set-up for the CLI and for the server processes that uvicorn starts itself.

`gridpfn --log-level` configures the process it runs in; a multi-process server's processes are
fresh interpreters, so the level travels to them in GRIDPFN_LOG_LEVEL and the app factory applies it.
"""

from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVEL_ENV = "GRIDPFN_LOG_LEVEL"


def configure(level: str) -> None:
    """Root logging at `level`, also for processes started from this one (via the environment)."""
    os.environ[LEVEL_ENV] = level.upper()
    logging.basicConfig(level=level.upper(), format=FORMAT)
    logging.getLogger("pandapower").setLevel(logging.WARNING)  # it announces missing optional plotting libs


def configure_inherited() -> None:
    """In a process started by uvicorn: the level its parent CLI was given, if logging is not set up yet."""
    level = os.environ.get(LEVEL_ENV)
    if level and not logging.getLogger().handlers:
        configure(level)
