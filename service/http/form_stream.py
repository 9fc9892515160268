"""A multipart/form-data upload read as it arrives: the text fields first, then one file part
written to disk under a byte limit the route sets once it knows what the fields name.

Why: Starlette's `request.form()` reads the whole body (spooling files to temporary storage) before
the route sees a field, so a batch upload for an unknown context set was read in full (200 MB)
before its 404, and its size was checked only afterwards. Here the route gets the fields that
precede the file part, looks up what they name and may refuse at once, without reading the file;
then the file part streams to disk, counting bytes, and stops at the limit. The fields must come
before the file part: httpx, requests, `curl -F` and a browser's FormData send parts in the order
they were given. A refusal sent before the body's end says `Connection: close` (`closing`): uvicorn
would otherwise read, and drop, the rest of the body to keep the connection, so the client would
still upload all of it.
"""

from __future__ import annotations

import asyncio
import codecs
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi.exceptions import RequestValidationError
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from service.engine.errors import EngineError, InvalidInput, TooLarge
from service.http.problems import ProblemError, field_error, problem_of, validation_problem

FILE_FIELD = "file"
FIELD_MAX_BYTES = 64 << 10  # a text field: a model name, an id, up to 99 quantiles
WRITE_BLOCK_BYTES = 1 << 20  # file data is written in blocks this big, off the event loop
FRAMING_BYTES = 64 << 10  # part headers, boundaries, an epilogue


def _malformed(reason: str) -> ProblemError:
    return ProblemError(
        400,
        "http-error",
        "Malformed multipart body",
        f"body: {reason}",
        [field_error("body", reason, "multipart/form-data with text fields, then one `file` part")],
    )


class FormStream:
    """Parts of a multipart body in order: `fields_before_file()`, then `save_file()`, then `finish()`."""

    def __init__(self, request: Request, max_fields: int) -> None:
        _, params = parse_options_header(request.headers.get("content-type", ""))
        boundary = params.get(b"boundary")
        if not boundary:
            raise _malformed("no boundary in the Content-Type header")
        charset = params.get(b"charset", b"utf-8").decode("latin-1")
        try:
            self.charset = codecs.lookup(charset).name
        except LookupError:
            self.charset = "latin-1"
        self.max_fields, self.fields_seen = max_fields, 0
        self.filename: str | None = None  # the file part's, once fields_before_file() found it
        self._file_too_large: Callable[[int], TooLarge] | None = None
        self._file_start = 0
        # where the file part's data begins in the body (None until the parser reached it) and where the
        # chunk being parsed begins: uvicorn hands over what arrived while the route was busy as one chunk,
        # which may hold the fields and much of the file, so the fields' limit is checked at that offset
        self._file_data_at: int | None = None
        self._chunk_at = 0
        self.chunks: AsyncIterator[bytes] = request.stream()
        self.events: deque[tuple[Any, ...]] = deque()
        self.received, self.byte_limit, self.ended = 0, max_fields * (FIELD_MAX_BYTES + 1024) + FRAMING_BYTES, False
        self._header, self._value = b"", b""
        self._disposition, self._name, self._data, self._is_file = b"", "", bytearray(), False
        self.parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
            },
        )

    # --- parser callbacks: they only queue events; the awaiting methods below act on them -------------
    def _part_begin(self) -> None:
        self._disposition, self._data = b"", bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        if self._header.lower() == b"content-disposition":
            self._disposition = self._value
        self._header, self._value = b"", b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"name" not in options:
            raise MultipartParseError('a part without a Content-Disposition "name"')
        self._name = options[b"name"].decode(self.charset, "replace")
        self._is_file = self._name == FILE_FIELD
        if self._is_file:
            self.events.append(("file", options.get(b"filename")))
        else:
            self.fields_seen += 1
            if self.fields_seen > self.max_fields:
                raise MultipartParseError(f"more than {self.max_fields} form fields")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._is_file:
            if self._file_data_at is None:
                self._file_data_at = self._chunk_at + start
            self.events.append(("data", bytes(data[start:end])))
            return
        self._data += data[start:end]
        if len(self._data) > FIELD_MAX_BYTES:
            raise MultipartParseError(f"form field {self._name!r} is longer than {FIELD_MAX_BYTES} bytes")

    def _part_end(self) -> None:
        self.events.append(
            ("end",) if self._is_file else ("field", self._name, self._data.decode(self.charset, "replace"))
        )

    # --- reading --------------------------------------------------------------------------------------
    async def _next(self) -> tuple[Any, ...] | None:
        while not self.events:
            if self.ended:
                return None
            try:
                chunk = await self.chunks.__anext__()
            except StopAsyncIteration:
                self.ended = True
                self._feed(None)
                continue
            self._chunk_at = self.received
            self.received += len(chunk)
            if self._file_too_large is not None:  # the file part is being saved: its own limit
                if self.received > self.byte_limit:
                    raise self._file_too_large(self.received - self._file_start)
                self._feed(chunk)
                continue
            self._feed(chunk)  # the chunk is in memory already; each field is bounded as it is parsed
            before_file = self.received if self._file_data_at is None else self._file_data_at
            if before_file > self.byte_limit:
                raise TooLarge(
                    "body",
                    f"form fields of more than {self.byte_limit} bytes",
                    f"at most {self.max_fields} form fields of at most {FIELD_MAX_BYTES} bytes each",
                )
        return self.events.popleft()

    def _feed(self, chunk: bytes | None) -> None:
        try:
            if chunk is None:
                self.parser.finalize()
            else:
                self.parser.write(chunk)
        except MultipartParseError as exc:
            raise _malformed(str(exc)) from None

    async def fields_before_file(self) -> tuple[dict[str, str], bool]:
        """The text fields up to the file part (or the end), and whether a file part follows."""
        fields: dict[str, str] = {}
        while (event := await self._next()) is not None:
            if event[0] == "file":
                self.filename = event[1].decode(self.charset, "replace") if event[1] else None
                return fields, True
            if event[0] == "field":
                if event[1] in fields:
                    raise InvalidInput(event[1], "sent twice", "each form field once")
                fields[event[1]] = event[2]
        return fields, False

    async def save_file(self, dest: Path, max_bytes: int, too_large: Callable[[int], TooLarge]) -> int:
        """Write the file part to `dest`; `too_large(bytes so far)` is raised past `max_bytes`, at once."""
        start = self.received if self._file_data_at is None else self._file_data_at
        self.byte_limit = start + max_bytes + FRAMING_BYTES
        self._file_too_large, self._file_start = too_large, start
        size, block = 0, bytearray()
        with open(dest, "wb") as out:
            while (event := await self._next()) is not None and event[0] == "data":
                size += len(event[1])
                if size > max_bytes:
                    raise too_large(size)
                block += event[1]
                if len(block) >= WRITE_BLOCK_BYTES:
                    await asyncio.to_thread(out.write, bytes(block))
                    block.clear()
            if block:
                await asyncio.to_thread(out.write, bytes(block))
        if event is None:
            raise _malformed("the body ended inside the file part")
        return size

    @staticmethod
    def closing(exc: EngineError | ProblemError | RequestValidationError) -> ProblemError:
        """The refusal `exc` answers, with `Connection: close`: the unread rest of the body is never read."""
        if isinstance(exc, EngineError):
            problem = problem_of(exc)
        elif isinstance(exc, RequestValidationError):
            problem = validation_problem(exc.errors())
        else:
            problem = exc
        problem.headers = {**problem.headers, "Connection": "close"}
        return problem

    async def finish(self) -> None:
        """Read to the end: anything after the file part is refused (the options must precede the file)."""
        while (event := await self._next()) is not None:
            if event[0] == "field":
                raise InvalidInput(
                    event[1], "a form field after the file part", "every form field before the file part"
                )
            if event[0] == "file":
                raise InvalidInput(FILE_FIELD, "a second file part", "one `file` part")
