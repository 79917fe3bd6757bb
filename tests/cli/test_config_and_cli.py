from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
from pydantic import ValidationError

from storage import CheckpointMeta, ConversationKey, StorageSettings
from storage.local import LocalStore
from testkit.storage_faults import overwrite_blob


def test_settings_defaults_and_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("BOT_"):
            monkeypatch.delenv(name)
    settings = StorageSettings()
    assert (settings.backend, settings.data_dir, settings.lease_seconds) == (
        "local",
        Path(".bot-data"),
        15,
    )
    assert settings.state_ttl == timedelta(days=7)
    monkeypatch.setenv("BOT_TABLE", "tbl")
    monkeypatch.setenv("BOT_BUCKET", "bkt")
    monkeypatch.setenv("BOT_STATE_TTL", "12h")
    settings = StorageSettings()
    assert (settings.backend, settings.state_ttl) == ("aws", timedelta(hours=12))
    monkeypatch.setenv("BOT_STORAGE", "local")
    assert StorageSettings().backend == "local"


def test_aws_without_names_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_STORAGE", "aws")
    monkeypatch.delenv("BOT_TABLE", raising=False)
    monkeypatch.delenv("BOT_BUCKET", raising=False)
    with pytest.raises(ValidationError, match="BOT_TABLE, BOT_BUCKET"):
        StorageSettings()
    monkeypatch.setenv("BOT_STATE_TTL", "soon")
    run = subprocess.run(
        [sys.executable, "-m", "bot", "admin", "status"], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert "not a duration" in run.stderr


def test_cli_creates_aws_resources_idempotently(aws_services: dict[str, str]) -> None:
    env = {**os.environ, "BOT_TABLE": "cli-table", "BOT_BUCKET": "cli-bucket"}
    command = [sys.executable, "-m", "bot", "admin", "init-storage"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert "table cli-table" in first.stdout and "bucket cli-bucket" in first.stdout
    second = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert "nothing" in second.stdout
    table = boto3.client("dynamodb").describe_table(TableName="cli-table")["Table"]
    indexes = {index["IndexName"] for index in table["GlobalSecondaryIndexes"]}
    assert indexes == {"by_status_shard", "by_place", "by_waiting"}
    ttl = boto3.client("dynamodb").describe_time_to_live(TableName="cli-table")
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    status = subprocess.run(
        [sys.executable, "-m", "bot", "admin", "status"], env=env, capture_output=True, text=True
    )
    assert status.returncode == 0 and "awaiting approval: 0" in status.stdout


def test_local_gc_removes_orphans_and_expired_conversations(tmp_path: Path) -> None:
    store = LocalStore(tmp_path, state_ttl=timedelta(seconds=1))
    key = ConversationKey(team="T", channel="C", thread_ts="1.0")
    lease, _ = store.acquire(key, "w")
    meta = CheckpointMeta(schema_version="1.21", agent_fingerprint="f")
    done = store.commit(lease, state={"v": 1}, meta=meta, expected_version=0)
    overwrite_blob(store, "checkpoints/T/C/1.0/orphan.json.gz", b"x")
    assert store.collect_garbage(orphan_age=timedelta(0)) == 1  # the orphan only
    assert done.checkpoint is not None
    assert store.load_checkpoint(done.checkpoint) == {"v": 1}
    time.sleep(1.1)
    assert store.collect_garbage(orphan_age=timedelta(0)) == 1  # expired with its record
    assert store.get(key) is None


def test_admin_help_lists_every_admin_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot", "admin", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    for command in ("status", "list", "discard", "init-storage", "gc", "migrate", "help"):
        assert f"\n    {command}" in done.stdout, command
    missing = subprocess.run([sys.executable, "-m", "bot", "admin"], capture_output=True, text=True)
    assert missing.returncode == 2 and "COMMAND" in missing.stderr


def test_a_client_id_and_secret_serve_slack_not_local_mode(tmp_path: Path) -> None:
    """`python -m bot` with SLACK_CLIENT_ID and SLACK_CLIENT_SECRET (no bot token) serves
    Slack for many workspaces, so it wants the signing secret; with neither a bot token nor
    a client, `serve` says what to set."""
    env = {**os.environ, "BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")}
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "BOT_TABLE"):
        env.pop(name, None)
    many = {**env, "SLACK_CLIENT_ID": "1.2", "SLACK_CLIENT_SECRET": "s"}
    run = subprocess.run([sys.executable, "-m", "bot"], env=many, capture_output=True, text=True)
    assert run.returncode == 2
    assert "SLACK_SIGNING_SECRET is required" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "bot", "serve"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 2
    assert "SLACK_CLIENT_ID and SLACK_CLIENT_SECRET" in run.stderr


def test_serve_says_at_start_that_the_agents_key_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent that would call OpenAI's model, no key: one line on stderr at start, naming
    the variable and the offline option; with the key, or offline, nothing."""
    from bot import cli
    from bot.settings import RuntimeSettings
    from examples.first_agent import build_agent

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cli.say_missing_key(build_agent(), RuntimeSettings())
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("bot: OPENAI_API_KEY is not set, and agent 'assistant' runs on")
    assert "BOT_MODEL=offline" in line
    cli.say_missing_key(build_agent(), RuntimeSettings(model="offline"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cli.say_missing_key(build_agent(), RuntimeSettings())
    assert capsys.readouterr().err == ""
