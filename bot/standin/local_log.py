"""Where local mode's details go: the terminal names only the page's URL (and a problem that
needs the person, in one line); what the stand-in says and the bot child's output go to
`BOT_DATA_DIR/local-mode.log`, without the start-up lines a restart repeats."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import IO

LOG_NAME = "local-mode.log"
STARTUP_GRACE = 2.0  # seconds after the health check in which start-up lines still arrive


def shape(line: str) -> str:
    """A log line without its time stamp, numbers and ids: two starts print the same shape."""
    line = re.sub(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+\s*", "", line)
    return re.sub(r"\w*\d\w*", "#", line)


class LocalLog:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOG_NAME
        self._file: IO[str] | None = None
        self._startup_shapes: set[str] = set()

    def _out(self) -> IO[str]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        return self._file

    def write(self, line: str) -> None:
        out = self._out()
        out.write(line + "\n")
        out.flush()

    def say(self, line: str, *, terminal: bool = False) -> None:
        """A line of the stand-in's: to the log; also to the terminal when the person must
        act on it."""
        self.write(f"local mode: {line}")
        if terminal:
            print(f"local mode: {line} (details in {self.path})", file=sys.stderr, flush=True)

    def tell(self, line: str) -> None:
        """A line the person must see at once: to the log and the terminal."""
        self.write(f"local mode: {line}")
        print(f"local mode: {line}", file=sys.stderr, flush=True)

    async def pump(
        self, stream: asyncio.StreamReader, generation: int, healthy_at: dict[int, float]
    ) -> None:
        """The bot's output into the log, except the start-up lines a restart repeats."""
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line longer than the buffer
                raw = await stream.read(1 << 16)
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip("\n")
            healthy = healthy_at.get(generation)
            if healthy is None or time.monotonic() - healthy < STARTUP_GRACE:
                if generation == 1:
                    self._startup_shapes.add(shape(line))
                elif shape(line) in self._startup_shapes:
                    continue
            self.write(line)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
