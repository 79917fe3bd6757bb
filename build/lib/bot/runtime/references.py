"""Short reference ids that tie a notice shown to users to the log lines with the details."""

from __future__ import annotations

import secrets


def new_reference() -> str:
    return "ref-" + secrets.token_hex(4)
