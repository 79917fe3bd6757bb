"""`python -m bot [serve | admin ...]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from storage import StorageSettings, Store, open_store
from storage.durations import parse_duration
from storage.models import Status


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.getenv("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = StorageSettings()
    except ValidationError as exc:
        return config_error(exc)
    handler = args.handler if hasattr(args, "handler") else _run_local
    result: int = handler(settings, args)
    return result


def config_error(exc: ValidationError) -> int:
    """One line per problem, naming the variable."""
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        print(f"configuration error: {where.upper()}: {error['msg']}", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__)
    commands = parser.add_subparsers(title="commands")
    serve = commands.add_parser("serve", help="serve Slack (Socket Mode or HTTP)")
    serve.set_defaults(handler=_serve)
    admin = commands.add_parser("admin", help="operator commands")
    admin_commands = admin.add_subparsers(title="admin commands", required=True)
    init = admin_commands.add_parser(
        "init-storage", help="create the DynamoDB table and S3 bucket (development, tests)"
    )
    init.set_defaults(handler=_init_storage)
    status = admin_commands.add_parser("status", help="conversations by status")
    status.set_defaults(handler=_status)
    listing = admin_commands.add_parser("list", help="conversations in one status")
    listing.add_argument("--status", default=Status.AWAITING_APPROVAL.value, choices=list(Status))
    listing.add_argument("--idle-for", default="0s", help="only idle this long (e.g. 12h, 7d)")
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(handler=_list)
    gc = admin_commands.add_parser("gc", help="local backend: drop expired rows, orphan blobs")
    gc.set_defaults(handler=_gc)
    return parser


def _describe(settings: StorageSettings) -> str:
    if settings.backend == "aws":
        return f"aws (table {settings.table}, bucket {settings.bucket})"
    return f"local ({settings.data_dir.resolve()})"


def _run_local(settings: StorageSettings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    counts = store.count_by_status()
    print(f"storage: {_describe(settings)}; conversations: {_format_counts(counts)}")
    if not os.getenv("SLACK_BOT_TOKEN"):
        print(
            "local mode: storage is ready, but there is no local Slack stand-in yet. To serve "
            "a real workspace set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (HTTP) or "
            "SLACK_APP_TOKEN (Socket Mode); see the README."
        )
        return 0
    return _serve(settings, args)


def _serve(settings: StorageSettings, args: argparse.Namespace) -> int:
    from agents.exceptions import UserError

    from bot.agent_loader import AgentLoadError
    from bot.settings import RuntimeSettings
    from bot.slackapp.server import serve
    from bot.slackapp.settings import SlackSettings
    from bot.wiring import build_runtime

    try:
        slack = SlackSettings()
        runtime_settings = RuntimeSettings()
    except ValidationError as exc:
        return config_error(exc)
    try:
        runtime = build_runtime(settings, runtime_settings)
    except (AgentLoadError, UserError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(slack, runtime, runtime_settings.admins))
    return 0


def _init_storage(settings: StorageSettings, args: argparse.Namespace) -> int:
    if settings.backend != "aws":
        open_store(settings).close()
        print(f"local storage ready in {settings.data_dir.resolve()}")
        return 0
    from storage.aws import create_resources

    assert settings.table and settings.bucket
    created = create_resources(settings.table, settings.bucket)
    print("created: " + (", ".join(created) if created else "nothing (all present)"))
    return 0


def _status(settings: StorageSettings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    print(f"storage: {_describe(settings)}")
    print(_format_counts(store.count_by_status()))
    _print_oldest(store)
    return 0


def _print_oldest(store: Store) -> None:
    for status in (Status.AWAITING_APPROVAL, Status.INTERRUPTED):
        oldest = store.list_by_status(status, limit=1)
        if oldest:
            print(f"oldest {status}: {oldest[0].key} since {oldest[0].last_activity_at:%F %T}Z")


def _list(settings: StorageSettings, args: argparse.Namespace) -> int:
    store = open_store(settings)
    idle = parse_duration(args.idle_for) if args.idle_for not in ("0", "0s") else None
    for record in store.list_by_status(Status(args.status), idle_for=idle, limit=args.limit):
        version = record.checkpoint_version
        print(f"{record.key}\t{record.status}\tv{version}\t{record.last_activity_at:%F %T}Z")
    return 0


def _gc(settings: StorageSettings, args: argparse.Namespace) -> int:
    from storage.local import LocalStore

    store = open_store(settings)
    if not isinstance(store, LocalStore):
        print("gc is for the local backend; on AWS, TTL and S3 lifecycle rules clean up")
        return 0
    print(f"removed {store.collect_garbage()} orphan checkpoint blobs")
    return 0


def _format_counts(counts: dict[Status, int]) -> str:
    return ", ".join(f"{status} {count}" for status, count in counts.items())
