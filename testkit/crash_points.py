"""A crash point inside a bot process (`python -m bot serve`), for tests that must kill it
at a moment no outside observer can hit: set in its environment, installed by a test agent
when the bot loads it (`testkit.survival_agent`).

    DIE_AFTER_RESULTS=N   SIGKILL right after the N-th tool result is recorded in the tool
                          ledger (the write landed; nothing after it ran)
    DIE_AFTER_SUMMARY=1   SIGKILL right after the first commit that stores a summary of
                          earlier turns lands (nothing after it ran: the answer it holds
                          is not posted yet)

The process kills itself as `crash_child` does: a real SIGKILL, no cleanup, no flush."""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from storage.aws import AwsStore
from storage.local import LocalStore

_installed = False


def install_from_env() -> None:
    """Install the crash point the environment names (once per process)."""
    global _installed
    spec = os.getenv("DIE_AFTER_RESULTS")
    if os.getenv("DIE_AFTER_SUMMARY") and not _installed:
        _installed = True
        for store_class in (LocalStore, AwsStore):
            store_class.apply = _die_after_summary(store_class.apply)  # type: ignore[method-assign]
        return
    if not spec or _installed:
        return
    _installed = True
    die_at = int(spec)
    recorded = 0
    lock = threading.Lock()  # a result may be recorded on a worker thread

    def after_result() -> None:
        nonlocal recorded
        with lock:
            recorded += 1
            if recorded == die_at:
                os.kill(os.getpid(), signal.SIGKILL)

    for store_class in (LocalStore, AwsStore):
        store_class.complete_tool_call = _then(store_class.complete_tool_call, after_result)  # type: ignore[method-assign]


def _then(method: Callable[..., Any], after: Callable[[], None]) -> Callable[..., Any]:
    """`method`, then `after` (named as `method`, so the store treats the call as before)."""

    @functools.wraps(method)
    def method_then(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = method(self, *args, **kwargs)
        after()
        return done

    return method_then


def _die_after_summary(apply: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(apply)
    def apply_then_die(self: Any, commit: Any) -> Any:
        done = apply(self, commit)
        if commit.summary is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return done

    return apply_then_die
