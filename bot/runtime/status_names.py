"""What people and operators call each conversation status: one name per status wherever
one is shown (`/agent-admin` and `python -m bot admin`, the Home tab, `/resume`'s list). The
stored values (`storage.Status`) are durable and stay as they are: a conversation whose
saved state was set aside is stored as `needs_restart` and called "set aside", as its
thread's notice and its closed approval requests say."""

from __future__ import annotations

from storage import Status

NAMES = {
    Status.IDLE: "idle",
    Status.RUNNING: "running",
    Status.AWAITING_APPROVAL: "awaiting approval",
    Status.INTERRUPTED: "interrupted",
    Status.SET_ASIDE: "set aside",
    Status.DISCARDED: "discarded",
}


def status_name(status: Status) -> str:
    return NAMES[status]
