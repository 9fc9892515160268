"""The package version follows CHANGELOG.md (CalVer: the date of its newest dated section, as its header
says), so a release's number and its notes cannot drift apart."""

from __future__ import annotations

import re
import tomllib
from datetime import date
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def newest_section_date(changelog: str) -> date | None:
    """The first date of the first `## ` heading that has one ("(2026-11-24/25, night)" -> 2026-11-24)."""
    for line in changelog.splitlines():
        found = re.search(r"\((\d{4})-(\d{2})-(\d{2})", line) if line.startswith("## ") else None
        if found:
            return date(*(int(part) for part in found.groups()))
    return None


def test_newest_section_date_reads_headings_only():
    text = (
        "# Changelog\n\nsaid (2020-01-01) in prose\n## Unreleased\n"
        "## Fixes (2026-11-24/25, night)\n## Old (2026-11-22)\n"
    )
    assert newest_section_date(text) == date(2026, 11, 24)
    assert newest_section_date("# Changelog\n## Unreleased\n") is None


def test_package_version_is_the_newest_changelog_date():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    newest = newest_section_date((ROOT / "CHANGELOG.md").read_text())
    if newest is None:
        pytest.fail("CHANGELOG.md has no dated section heading")
    assert version == f"{newest.year}.{newest.month}.{newest.day}", (
        f"pyproject.toml says {version}; CHANGELOG.md's newest section is dated {newest}: set "
        f'version = "{newest.year}.{newest.month}.{newest.day}" (CalVer, the CHANGELOG\'s header)'
    )
