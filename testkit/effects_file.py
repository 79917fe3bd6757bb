"""Side effects of the test agents that run inside bot processes, counted in `$EFFECTS_FILE`:
one JSON line each, fsynced before the tool returns, so that a process killed right after
the effect has still left its record (`testkit.runtime.SideEffects` reads the file)."""

from __future__ import annotations

import json
import os
from typing import Any


def append_effect(fields: dict[str, Any]) -> None:
    line = json.dumps({**fields, "pid": os.getpid()})
    fd = os.open(os.environ["EFFECTS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
