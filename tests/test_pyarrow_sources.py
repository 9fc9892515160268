"""pyarrow's readers get native sources (a path, `pa.BufferReader`, `pa.py_buffer`), never a Python file object.

Reading through a Python file object (`io.BytesIO`, `open(...)`), pyarrow's I/O threads take the GIL; one still
doing so while the interpreter finalises aborts the process ("terminate called without an active exception",
exit -6) after the script's work is done: the README's client example died so in a CI run, and a script that only
reads a 100 x 194 Parquet answer from `io.BytesIO` died in 4 of 150 runs on this project's 2-core VM, 0 of 150 with
`pa.BufferReader` (`python bench/pyarrow_exit_abort.py`). apache/arrow#34314 is the upstream issue.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "models", "gridsim", "bench", "tests")
READERS = {
    "pq": {"read_table", "ParquetFile", "read_schema", "read_metadata", "ParquetDataset"},
    "pcsv": {"open_csv", "read_csv"},
    "pd": {"read_parquet"},
    "ipc": {"open_stream", "open_file", "RecordBatchStreamReader", "RecordBatchFileReader"},
}
PYTHON_FILES = {"BytesIO", "open", "StringIO"}


def _python_file_readers(source: str) -> list[tuple[int, str]]:
    """(line, call) of every pyarrow reader whose first argument is a Python file object made in place."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        owner = node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        if node.func.attr not in READERS.get(owner_name, set()):
            continue
        first = node.args[0]
        if isinstance(first, ast.Call):
            made = first.func.attr if isinstance(first.func, ast.Attribute) else getattr(first.func, "id", "")
            if made in PYTHON_FILES:
                found.append((node.lineno, f"{owner_name}.{node.func.attr}({made}(...))"))
    return found


def test_the_check_finds_a_reader_given_a_python_file():
    assert _python_file_readers("import io\npq.read_table(io.BytesIO(data))\n") == [(2, "pq.read_table(BytesIO(...))")]
    assert _python_file_readers("pa.ipc.open_stream(open(path, 'rb'))\npd.read_parquet(BytesIO(b))\n") == [
        (1, "ipc.open_stream(open(...))"),
        (2, "pd.read_parquet(BytesIO(...))"),
    ]
    assert _python_file_readers("pq.read_table(pa.BufferReader(data))\npd.read_csv(io.BytesIO(data))\n") == []


def test_no_pyarrow_reader_is_given_a_python_file_object():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {call}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, call in _python_file_readers(path.read_text())
    ]
    assert not offenders, "give pyarrow pa.BufferReader(data) or a path:\n" + "\n".join(offenders)
