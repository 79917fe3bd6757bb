"""Operator commands, shared by the Slack `/agent-admin` command and `python -m bot admin`:

status                                          counts by status, the oldest paused
list [stale] [--older-than 1d]                  paused / interrupted conversations
discard <permalink | team:channel:ts>           discard one conversation's saved state
discard stale --older-than <duration> [--dry-run]
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from bot.permalink import PermalinkError, parse_permalink
from bot.runtime import ConversationRuntime, Discarded, Refused
from storage import Conversation, ConversationKey, Status
from storage.durations import format_duration, parse_duration

USAGE = __doc__.split("\n\n", 1)[1].rstrip() if __doc__ else ""
DEFAULT_STALE = timedelta(days=1)


class AdminError(ValueError):
    pass


@dataclass(frozen=True)
class AdminReply:
    text: str
    ok: bool = True


def parse_age(text: str) -> timedelta:
    """Like a duration, but `0` (or `0s`) is allowed: every matching conversation."""
    return timedelta(0) if text.strip() in ("0", "0s") else parse_duration(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AdminError(f"{message}\n{USAGE}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="admin", add_help=False)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", add_help=False)
    commands.add_parser("help", add_help=False)
    listing = commands.add_parser("list", add_help=False)
    listing.add_argument("stale", nargs="?", choices=["stale"])
    listing.add_argument("--older-than", type=parse_age, default=None)
    discard = commands.add_parser("discard", add_help=False)
    discard.add_argument("target")
    discard.add_argument("--older-than", type=parse_age, default=None)
    discard.add_argument("--dry-run", action="store_true")
    return parser


class AdminCommands:
    def __init__(
        self, runtime: ConversationRuntime, link: Callable[[ConversationKey], str]
    ) -> None:
        self.runtime = runtime
        self.link = link

    async def run(self, text: str, *, team: str, by: str) -> AdminReply:
        try:
            args = _parser().parse_args(shlex.split(text or "help"))
        except (AdminError, ValueError) as exc:
            return AdminReply(str(exc), ok=False)
        if args.command == "help":
            return AdminReply(USAGE)
        if args.command == "status":
            return AdminReply(await self.status())
        if args.command == "list":
            return AdminReply(
                await self.listing(stale=bool(args.stale), older_than=args.older_than)
            )
        if args.target == "stale":
            if args.older_than is None:
                return AdminReply("discard stale needs --older-than <duration>, e.g. 7d", ok=False)
            return AdminReply(
                await self.discard_stale(args.older_than, dry_run=args.dry_run, by=by)
            )
        try:
            key = _target(args.target, team)
        except ValueError as exc:
            return AdminReply(str(exc), ok=False)
        return AdminReply(await self.discard(key, by=by))

    async def status(self) -> str:
        store = self.runtime.store
        counts = await self.runtime._call(store.count_by_status)
        lines = ["*Conversations by status*"]
        lines += [
            f"• {status.value.replace('_', ' ')}: {count}" for status, count in counts.items()
        ]
        for status in (Status.AWAITING_APPROVAL, Status.INTERRUPTED):
            oldest = await self.runtime._call(store.list_by_status, status, limit=1)
            if oldest:
                lines.append(f"Oldest {status.value.replace('_', ' ')}: {self._line(oldest[0])}")
        return "\n".join(lines)

    async def listing(self, *, stale: bool, older_than: timedelta | None) -> str:
        default = DEFAULT_STALE if stale else timedelta(0)
        age = older_than if older_than is not None else default
        records = await self.runtime.stale(age)
        title = f"idle longer than {format_duration(age)}" if age else "paused or set aside"
        if not records:
            return f"No conversations {title}."
        return "\n".join([f"*Conversations {title}*", *(self._line(r) for r in records)])

    async def discard(self, key: ConversationKey, *, by: str) -> str:
        outcomes = await self.runtime.discard(key, by=by)
        for outcome in outcomes:
            if isinstance(outcome, Refused):
                return outcome.text
            if isinstance(outcome, Discarded):
                return _summary(outcome, self.link(key))
        return "Nothing was discarded."

    async def discard_stale(self, older_than: timedelta, *, dry_run: bool, by: str) -> str:
        records = await self.runtime.stale(older_than)
        if dry_run:
            if not records:
                return f"Dry run: nothing idle longer than {format_duration(older_than)}."
            lines = [f"Dry run: would discard {len(records)}:"]
            return "\n".join(lines + [self._line(r) for r in records])
        results = [await self.discard(record.key, by=by) for record in records]
        return (
            "\n".join([f"Discarded {len(results)}:", *results])
            if results
            else (f"Nothing idle longer than {format_duration(older_than)}.")
        )

    def _line(self, record: Conversation) -> str:
        return (
            f"• <{self.link(record.key)}|{record.key}> · {record.status.value.replace('_', ' ')}"
            f" · last activity {record.last_activity_at:%Y-%m-%d %H:%M} UTC"
        )


def _target(text: str, team: str) -> ConversationKey:
    if text.count(":") == 2 and "/" not in text:
        return ConversationKey.parse(text)
    try:
        return parse_permalink(text, team)
    except PermalinkError:
        raise
    except ValueError as exc:  # pydantic: a malformed id inside the link
        raise PermalinkError(f"not a thread link: {text!r}") from exc


def _summary(result: Discarded, link: str) -> str:
    calls = ", ".join(f"`{c.tool_name}`" for c in result.pending_calls) or "none"
    checkpoint = "its checkpoint" if result.removed_checkpoint else "no checkpoint"
    return (
        f"• <{link}|{result.key}>: removed {checkpoint}; pending calls dropped: {calls}; "
        f"queued messages dropped: {result.dropped_messages} (was {result.previous_status})"
    )
