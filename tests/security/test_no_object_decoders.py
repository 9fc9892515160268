"""No code path may hand request bytes to a general-purpose object decoder.

A guard on the source, so the next change cannot quietly bring one back: pandapower's and pandas'
JSON readers (object hooks, file paths), eval/exec, yaml.load and torch.load without weights_only.
The one pickle in the service is the exact GP's pipe to its own worker processes (numbers the
server parsed itself; nothing a client sent reaches it as bytes), named here so a new one fails.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("service", "gridsim", "models")
FORBIDDEN = {
    "pandapower's object decoder": re.compile(r"\bfrom_json(_string|_dict)?\s*\("),
    "pandas' JSON reader (reads paths and URLs)": re.compile(r"\bread_json\s*\("),
    "eval/exec": re.compile(r"(?<![.\w])(eval|exec)\s*\("),
    "yaml.load": re.compile(r"\byaml\.(unsafe_)?load\s*\("),
    "pickle": re.compile(r"\bpickle\.loads?\s*\(|\bcloudpickle\b|\bdill\b"),
    "torch.load without weights_only": re.compile(r"\btorch\.load\s*\((?![^)]*weights_only=True)"),
}
ALLOWED = {("service/engine/gp_worker.py", "pickle")}  # see the module docstring


def _code_lines(path: Path):
    in_doc = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.count('"""') == 1:
            in_doc = not in_doc
            continue
        if in_doc or stripped.startswith(("#", '"""')):
            continue
        yield number, line.split("#", 1)[0]


def test_no_object_decoder_in_the_service():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            for number, code in _code_lines(path):
                for what, pattern in FORBIDDEN.items():
                    if pattern.search(code) and (relative, what) not in ALLOWED:
                        found.append(f"{relative}:{number}: {what}: {code.strip()}")
    assert not found, "\n".join(found)


def test_the_guard_catches_what_it_names(tmp_path):
    """The patterns match the calls they exist for (the guard can fail)."""
    samples = {
        "pandapower's object decoder": "net = pp.from_json_string(text)",
        "pandas' JSON reader (reads paths and URLs)": "pd.read_json(body)",
        "eval/exec": "value = eval(text)",
        "yaml.load": "yaml.load(f)",
        "pickle": "pickle.loads(blob)",
        "torch.load without weights_only": "torch.load(path, map_location='cpu')",
    }
    for what, code in samples.items():
        assert FORBIDDEN[what].search(code), what
    assert not FORBIDDEN["torch.load without weights_only"].search("torch.load(p, weights_only=True)")
    assert not FORBIDDEN["eval/exec"].search("model.eval()")
