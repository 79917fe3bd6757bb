"""`python -m bot [serve | admin ...]`.

python -m bot                     local mode (embedded storage), or serve when Slack is set
python -m bot serve               serve Slack: Socket Mode or HTTP
python -m bot admin init-storage  create the DynamoDB table and S3 bucket (development)
python -m bot admin gc            local backend: drop expired rows and orphan blobs
python -m bot admin migrate       aws backend: bring a table of an earlier release up to date
python -m bot admin status | list | discard ...  as /agent-admin (python -m bot admin --help)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from bot.admin_usage import COMMANDS
from bot.settings import ProcessSettings
from storage import StorageSettings, open_store

if TYPE_CHECKING:
    from agents import Agent
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.runtime import ConversationRuntime
    from bot.settings import RuntimeSettings
    from bot.slackapp.poster import SlackPoster
    from bot.wiring import MakeRuntime
    from storage import Store
    from storage.calls import StorageCalls

# Every admin command: its usage and what it does (shown by `python -m bot admin --help`):
# those shared with /agent-admin, then the operator's own.
ADMIN_COMMANDS = {
    **{name: (" | ".join(lines), summary) for name, (lines, summary) in COMMANDS.items()},
    "init-storage": ("init-storage", "create the DynamoDB table and S3 bucket (development)"),
    "gc": ("gc", "local backend: drop expired rows and orphan blobs"),
    "migrate": ("migrate", "aws backend: bring a table of an earlier release up to date"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.process = ProcessSettings()
        settings = StorageSettings()
    except ValidationError as exc:
        return config_error(exc)
    logging.basicConfig(
        level=args.process.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler = getattr(args, "handler", _default)
    result: int = handler(settings, args)
    return result


def config_error(exc: ValidationError) -> int:
    """One line per problem, naming the variable."""
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        print(f"configuration error: {where.upper()}: {error['msg']}", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bot", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    commands = parser.add_subparsers(title="commands")
    commands.add_parser("serve", help="serve Slack (Socket Mode or HTTP)").set_defaults(
        handler=_serve
    )
    admin = commands.add_parser(
        "admin",
        help="operator commands",
        description="Operator commands; status, list and discard are also /agent-admin's.",
        formatter_class=argparse.RawTextHelpFormatter,
    )
    admin.add_argument("--team", help="team id for permalinks (default: from auth.test)")
    admin.add_argument("--enterprise", help="with many workspaces: the team's organisation")
    actions = admin.add_subparsers(title="commands", dest="admin_command", metavar="COMMAND")
    for name, (usage, summary) in ADMIN_COMMANDS.items():
        action = actions.add_parser(
            name, help=summary, usage=f"python -m bot admin {usage}", add_help=False
        )
        action.add_argument("words", nargs=argparse.REMAINDER)
    admin.set_defaults(handler=_admin, admin_parser=admin)
    return parser


def _default(settings: StorageSettings, args: argparse.Namespace) -> int:
    """Serve Slack when it is configured; otherwise local mode: the browser-based stand-in
    with the real bot behind it, on embedded storage. Its ports are PORT (3000) and
    BOT_LOCAL_BOT_PORT (PORT+1); a taken one is a one-line error naming its variable, exit
    code 2, rather than another port picked silently: the URL stays the one you expect, and
    a second local mode on the same BOT_DATA_DIR is not started by accident."""
    process: ProcessSettings = args.process
    if process.serves_slack:
        return _serve(settings, args)
    from bot.standin.workspace import LocalModeError, run_workspace

    if settings.backend != "local":
        print(f"local mode with {_describe(settings)} storage")
    try:
        port = _port("PORT", process.port, 3000)
        bot_port = _port("BOT_LOCAL_BOT_PORT", process.local_bot_port, port + 1)
        if bot_port == port:
            raise LocalModeError(f"PORT and BOT_LOCAL_BOT_PORT are both {port}; they must differ")
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(
            run_workspace(
                settings.data_dir.resolve(),
                port,
                bot_port,
                demo=process.demo_model,
                storage=settings,
                oauth=process.local_oauth,
            )
        )
    except LocalModeError as exc:
        # A busy port is the usual first-run problem: one line naming the variable.
        print(f"local mode: {exc}", file=sys.stderr)
        return 2
    return 0


def _port(variable: str, given: str, default: int) -> int:
    from bot.standin.workspace import LocalModeError

    value = given or str(default)
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise LocalModeError(f"{variable} must be a port number (1-65535), not {value!r}")
    return int(value)


def _describe(settings: StorageSettings) -> str:
    if settings.backend == "aws":
        return f"aws (table {settings.table}, bucket {settings.bucket})"
    return f"local ({settings.data_dir.resolve()})"


def _serve(settings: StorageSettings, args: argparse.Namespace) -> int:
    from bot.settings import RuntimeSettings
    from bot.slackapp.settings import SlackSettings
    from bot.wiring import serve_slack

    try:
        slack = SlackSettings()
        runtime_settings = RuntimeSettings()
    except ValidationError as exc:
        return config_error(exc)
    agent = _checked_agent(runtime_settings)
    if agent is None:
        return 2
    say_missing_key(agent, runtime_settings)
    store = open_store(settings)
    make_runtime = _slack_runtime(store, runtime_settings, agent)
    if make_runtime is None:
        return 2
    admins = runtime_settings.admins
    asyncio.run(serve_slack(slack, store, make_runtime, admins, own_process=True))
    return 0


def _slack_runtime(
    store: Store, runtime_settings: RuntimeSettings, agent: Agent[Any]
) -> MakeRuntime | None:
    from bot.suggestions import SuggestionsError
    from bot.tracing import TracingConfigError
    from bot.wiring import slack_runtime

    try:
        return slack_runtime(store, runtime_settings, agent)
    except (SuggestionsError, TracingConfigError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return None


def say_missing_key(agent: Agent[Any], runtime_settings: RuntimeSettings) -> None:
    """Serving starts all the same (the key may come with the next deploy), but says at once
    that runs would stop for want of it."""
    from bot.model_choice import missing_key_text
    from bot.runtime import needs_openai_key

    names = needs_openai_key(agent, runtime_settings)
    if names:
        print(f"bot: {missing_key_text(names)}", file=sys.stderr, flush=True)


def _checked_agent(runtime_settings: RuntimeSettings) -> Agent[Any] | None:
    from agents.exceptions import UserError

    from bot.agent_loader import AgentLoadError
    from bot.runtime import UnguardedTool
    from bot.wiring import checked_agent

    try:
        return checked_agent(runtime_settings)
    except (AgentLoadError, UnguardedTool, UserError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return None


def _runtime(
    store: Store,
    runtime_settings: RuntimeSettings,
    poster: SlackPoster | None,
    storage_calls: StorageCalls,
) -> ConversationRuntime | None:
    from agents.exceptions import UserError

    from bot.agent_loader import AgentLoadError
    from bot.runtime import UnguardedTool
    from bot.suggestions import SuggestionsError, load_suggestions
    from bot.tracing import TracingConfigError
    from bot.wiring import build_runtime

    try:
        runtime = build_runtime(
            store, runtime_settings, on_outcome=poster, storage_calls=storage_calls
        )
        load_suggestions(runtime_settings.agent)  # the container's prompts, checked at start
        return runtime
    except (AgentLoadError, SuggestionsError, TracingConfigError, UnguardedTool, UserError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return None


def _admin(settings: StorageSettings, args: argparse.Namespace) -> int:
    command = args.admin_command
    if command is None:
        args.admin_parser.print_help(sys.stderr)
        return 2
    if command == "init-storage":
        return _init_storage(settings)
    if command == "gc":
        return _gc(settings)
    if command == "migrate":
        return _migrate(settings)
    text = " ".join([command, *args.words])
    return asyncio.run(_admin_command(settings, args.process, text, args.team, args.enterprise))


async def _admin_command(
    settings: StorageSettings,
    process: ProcessSettings,
    text: str,
    team: str | None,
    enterprise: str | None,
) -> int:
    from bot.admin import AdminCommands
    from bot.permalink import permalink
    from bot.settings import RuntimeSettings

    try:
        runtime_settings = RuntimeSettings()
    except ValidationError as exc:
        return config_error(exc)
    from storage.calls import StorageCalls

    store = open_store(settings)
    storage_calls = StorageCalls(
        store
    )  # the runtime's storage bridge, shared with the installations
    poster, client = _admin_poster(process, store, storage_calls)
    runtime = _runtime(store, runtime_settings, poster, storage_calls)
    if runtime is None:
        return 2
    if team is None and client is not None:
        team = (await client.auth_test())["team_id"]
    reply = await AdminCommands(runtime, permalink).run(
        text, team=team or "", by=None, enterprise=enterprise
    )
    if poster is not None:  # a redelivered notice's second read-back
        await poster.close()
    await runtime.close()  # MCP servers, if serving a thread had to connect them
    print(reply.text, file=sys.stdout if reply.ok else sys.stderr)
    return 0 if reply.ok else 2


def _admin_poster(
    process: ProcessSettings, store: Store, storage_calls: StorageCalls
) -> tuple[SlackPoster | None, AsyncWebClient | None]:
    """Where the admin command's notices (e.g. "discarded") go, as from the slash command:
    with the bot token (and its client, to learn the workspace), or with each workspace's
    token from the installations kept; nowhere without Slack credentials."""
    if not (process.bot_token or process.many_workspaces):
        return None, None
    from bot.slackapp.app import web_client
    from bot.slackapp.poster import SlackPoster
    from bot.slackapp.settings import SlackSettings

    if process.bot_token:
        client = web_client(
            SlackSettings.model_construct(bot_token=process.bot_token, api_url=process.api_url)
        )
        return SlackPoster(client), client
    from bot.slackapp.installations import StoredInstallations
    from bot.slackapp.oauth import workspace_clients

    slack = SlackSettings.model_construct(
        client_id=process.slack_client_id,
        client_secret=process.slack_client_secret,
        api_url=process.api_url,
    )
    installations = StoredInstallations(store, storage_calls)
    return SlackPoster(workspace_clients(slack, installations, web_client(slack))), None


def _init_storage(settings: StorageSettings) -> int:
    if settings.backend != "aws":
        open_store(settings).close()
        print(f"local storage ready in {settings.data_dir.resolve()}")
        return 0
    from storage.aws import create_resources

    assert settings.table and settings.bucket
    created = create_resources(settings.table, settings.bucket)
    print("created: " + (", ".join(created) if created else "nothing (all present)"))
    return 0


def _migrate(settings: StorageSettings) -> int:
    if settings.backend != "aws":
        print("nothing to migrate: the local backend migrates itself when it opens")
        return 0
    from storage.aws import AwsStore

    store = open_store(settings)
    assert isinstance(store, AwsStore)
    done = store.migrate()
    print(
        f"migrated {done.records} conversations: {done.indexed} indexed, {done.counted} "
        f"counted, {done.messages_moved} queued messages moved into their records, "
        f"{done.placed} paused ones listed by channel, {done.waiting} awaiting approval "
        "listed for their run's starter"
    )
    return 0


def _gc(settings: StorageSettings) -> int:
    from storage.local import LocalStore

    store = open_store(settings)
    if not isinstance(store, LocalStore):
        print("gc is for the local backend; on AWS, TTL and S3 lifecycle rules clean up")
        return 0
    print(f"removed {store.collect_garbage()} orphan checkpoint blobs")
    return 0
