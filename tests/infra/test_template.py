"""infra/template.yaml: lints clean, declares what storage/ uses, deploys into moto's
CloudFormation, and its IAM policy grants exactly the actions the code calls."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.decode import cfn_yaml

from storage import (
    CheckpointMeta,
    ConversationKey,
    PersonKey,
    Removal,
    Status,
    Store,
    Summary,
    Verdict,
)
from storage.aws import AwsStore
from storage.aws.provision import TABLE_DEFINITION, TTL_ATTRIBUTE, create_resources
from storage.writes import Commit
from testkit.services import ROOT

TEMPLATE_PATH = ROOT / "infra" / "template.yaml"
TEMPLATE = cfn_yaml.load(str(TEMPLATE_PATH))
RESOURCES = TEMPLATE["Resources"]
KEY = ConversationKey(team="TI", channel="CI", thread_ts="1700000900.000100")


def plain(node: Any) -> Any:
    """cfn-lint's nodes as plain dicts and lists."""
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def test_cfn_lint_is_clean() -> None:
    run = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), str(TEMPLATE_PATH)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_table_is_the_one_the_code_uses() -> None:
    table = plain(RESOURCES["StateTable"]["Properties"])
    for field in ("AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes"):
        assert table[field] == TABLE_DEFINITION[field]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    # moto drops these, so they are asserted here, from the template.
    assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    with_kms, without = table["SSESpecification"]["Fn::If"][1:]
    assert with_kms["SSEEnabled"] is True and with_kms["SSEType"] == "KMS"
    assert without == {"SSEEnabled": True}


def test_bucket_is_private_encrypted_tls_only_and_expires_blobs() -> None:
    bucket = plain(RESOURCES["StateBucket"]["Properties"])
    assert bucket["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True
    )
    encryption = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    kms, s3 = encryption["ServerSideEncryptionByDefault"]["Fn::If"][1:]
    assert kms["SSEAlgorithm"] == "aws:kms" and s3["SSEAlgorithm"] == "AES256"
    rules = bucket["LifecycleConfiguration"]["Rules"]
    expiring = {r["Prefix"]: r["ExpirationInDays"] for r in rules if "Prefix" in r}
    retention = {"Fn::FindInMap": ["RetentionByStateTtl", {"Ref": "StateTtlDays"}, "Days"]}
    assert expiring == {
        prefix: retention for prefix in ("checkpoints/", "items/", "tools/", "files/")
    }
    [deny] = plain(RESOURCES["StateBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"])
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


ALLOWED_TTLS = [
    str(days) for days in plain(TEMPLATE["Parameters"]["StateTtlDays"])["AllowedValues"]
]


def test_state_ttl_is_one_of_a_fixed_list() -> None:
    ttl = plain(TEMPLATE["Parameters"]["StateTtlDays"])
    assert ALLOWED_TTLS == ["1", "2", "3", "7", "14", "30", "60", "90"]
    assert ttl["Default"] == "7"
    assert "MinValue" not in ttl and "MaxValue" not in ttl


@pytest.mark.parametrize("ttl", ALLOWED_TTLS)
def test_retention_outlives_every_allowed_state_ttl(ttl: str) -> None:
    """S3 must keep a blob longer than the bot accepts the state that points at it, or a
    paused conversation would fail closed as "missing" before it expires."""
    retention = plain(TEMPLATE["Mappings"]["RetentionByStateTtl"][ttl])["Days"]
    assert isinstance(retention, int)
    assert retention > int(ttl)


def test_retention_is_derived_not_a_parameter() -> None:
    """One knob: a retention at or below the TTL cannot be expressed at all."""
    assert set(TEMPLATE["Parameters"]) == {"TableName", "BucketName", "StateTtlDays", "KmsKeyArn"}
    assert set(TEMPLATE["Mappings"]["RetentionByStateTtl"]) == set(ALLOWED_TTLS)
    assert "CheckpointRetentionDays" not in TEMPLATE_PATH.read_text()
    assert "Rules" not in TEMPLATE  # nothing left for a Rule to check


# -- the policy against the code ------------------------------------------------------------

TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


class ActionRecorder:
    """Every IAM action (and resource kind) the store's clients call, from botocore events."""

    def __init__(self, store: AwsStore) -> None:
        self.actions: set[tuple[str, str]] = set()
        self.s3_keys: set[str] = set()
        store.dynamodb.meta.events.register("before-parameter-build.dynamodb", self._dynamodb)
        store.s3.meta.events.register("before-parameter-build.s3", self._s3)

    def _dynamodb(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name == "TransactWriteItems":
            for action in params["TransactItems"]:
                [(kind, _body)] = action.items()
                self.actions.add((f"dynamodb:{TRANSACT_ACTIONS[kind]}", "table"))
            return
        index = params.get("IndexName")
        resource = f"index/{index}" if index else "table"
        self.actions.add((f"dynamodb:{model.name}", resource))

    def _s3(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.actions.add((f"s3:{model.name}", "object"))
        self.s3_keys.add(params["Key"])


def workload(store: Store) -> set[str]:
    """Every public storage operation, the way the runtime uses them. Returns their names."""
    meta = CheckpointMeta(schema_version="1.21", agent_fingerprint="f")
    store.enqueue(KEY, "Ev1", '{"user":"U","text":"hi"}')
    store.claim_event("Ev2")
    store.event_claimed("Ev2")
    lease, _ = store.acquire(KEY, "w", status=Status.RUNNING)
    lease = store.renew(lease)
    inbox = store.read_inbox(KEY)
    page = store.read_items(KEY, 10)
    done = store.commit(
        lease,
        state={"s": 1},
        meta=meta,
        expected_version=0,
        items=['"x"', "y" * 400_000],
        base_seq=page.next_seq,
        consume=[e.entry_id for e in inbox],
    )
    assert done.checkpoint is not None
    store.load_checkpoint(done.checkpoint)
    store.commit(  # a summary of the history, in its own row, with the checkpoint
        lease,
        state={"s": 2},
        meta=meta,
        expected_version=done.checkpoint.version,
        summary=Summary(through=1, text="they said x"),
    )
    summed = store.get(KEY)
    assert summed is not None and store.read_summary(summed) is not None
    store.append_items(KEY, ['"a"'] * 120, lease)  # a batch beyond one transaction
    store.pop_item(KEY, lease)
    store.begin_tool_call(lease, "c1", "send", "{}")
    store.complete_tool_call(lease, "c1", "z" * 400_000)
    store.get_tool_call(KEY, "c1")
    store.begin_tool_call(lease, "c2", "charge", "{}")
    store.retry_tool_call(lease, "c2", max_attempts=3)  # a keyed call started again
    store.set_status(lease, Status.RUNNING)
    store.keep(KEY, "Ev-stop", '{"kind":"stop","user":"U"}', create=False, stop_by="U")
    store.stop_requested(KEY)
    store.record_feedback(KEY, "a1", "U", Verdict.GOOD)
    store.count_feedback()
    store.apply(Commit(key=KEY, lease=lease, status=Status.RUNNING))
    store.clear_items(KEY, lease)
    store.release(lease, status=Status.IDLE, delivered=True)
    lease, _ = store.acquire(KEY, "w", force=True)
    store.drop_checkpoint(lease, status=Status.DISCARDED, release=True)
    store.get(KEY)
    store.list_by_status(Status.AWAITING_APPROVAL)
    store.count_by_status()
    store.keep(KEY, "Ev3", '{"user":"U","text":"more"}', owner="w2")
    store.list_by_team(KEY.team)
    store.list_paused_in(KEY.team, KEY.channel, participant="U")
    lease, _ = store.acquire(KEY, "w3", force=True)
    store.release(lease, status=Status.AWAITING_APPROVAL, run_by="U")
    store.list_waiting_on(KEY.team, "U")
    store.list_waiting_in(KEY.team)
    person = PersonKey(team=KEY.team, user="U")
    store.mark_greeted(person)
    store.unmark_greeted(person)
    store.note_viewing(person, '{"channel":"CI"}', store.clock())
    store.note_conversation(person, KEY)
    store.get_person(person)
    store.save_installation("E1:TI", '{"bot_token":"xoxb-1"}')
    store.find_installation("E1:TI")
    store.delete_installation("E1:TI", only='{"bot_token":"xoxb-1"}')
    store.issue_state("s1", timedelta(minutes=10))
    store.consume_state("s1")
    store.record_removal(Removal(removal_id="Ev9", team="TI", at=store.clock()))
    store.find_removal("Ev9")
    store.pending_removals()
    store.finish_removal("Ev9")
    store.beat("host|boot|1|2")
    store.beats()
    store.delete_checkpoint(done.checkpoint)
    later = store.clock() + store.state_ttl + timedelta(days=1)
    store.clock = lambda: later
    store.expired_record(KEY)
    store.enqueue(KEY, "Ev4", '{"user":"U","text":"much later"}')  # expired: brought back
    for i in range(6):  # a busy thread: its further messages go to rows
        store.keep(KEY, f"Ev5.{i}", '{"user":"U","text":"busy"}', create=False)
    store.refusals_told(KEY, ["Ev5.0"], counted=1)
    digest = store.put_content(b"a shared file")
    store.put_content(b"a shared file")  # shared again: kept once
    store.get_content(digest)
    return {
        "beat",
        "beats",
        "put_content",
        "get_content",
        "enqueue",
        "keep",
        "claim_event",
        "event_claimed",
        "acquire",
        "renew",
        "read_inbox",
        "read_items",
        "commit",
        "load_checkpoint",
        "read_summary",
        "append_items",
        "pop_item",
        "begin_tool_call",
        "complete_tool_call",
        "get_tool_call",
        "retry_tool_call",
        "set_status",
        "stop_requested",
        "record_feedback",
        "count_feedback",
        "apply",
        "clear_items",
        "release",
        "drop_checkpoint",
        "get",
        "expired_record",
        "list_by_status",
        "count_by_status",
        "delete_checkpoint",
        "list_by_team",
        "list_paused_in",
        "list_waiting_on",
        "list_waiting_in",
        "mark_greeted",
        "unmark_greeted",
        "note_viewing",
        "note_conversation",
        "get_person",
        "save_installation",
        "find_installation",
        "delete_installation",
        "issue_state",
        "consume_state",
        "record_removal",
        "find_removal",
        "pending_removals",
        "finish_removal",
        "refusals_told",
    }


def policy_actions(*, with_kms: bool) -> set[tuple[str, str]]:
    statements = plain(RESOURCES["BotPolicy"]["Properties"]["PolicyDocument"]["Statement"])
    condition, kms_branch, plain_branch = statements["Fn::If"]
    assert condition == "UseKms"
    granted = set()
    for statement in kms_branch if with_kms else plain_branch:
        resources = statement["Resource"]
        for resource in resources if isinstance(resources, list) else [resources]:
            text = str(resource)
            index = re.search(r"/index/([A-Za-z0-9_.-]+)", text)
            kind = (
                f"index/{index.group(1)}"
                if index
                else "object"
                if "/*" in text
                else "key"
                if "KmsKeyArn" in text
                else "table"
            )
            actions = statement["Action"]
            granted |= {(a, kind) for a in (actions if isinstance(actions, list) else [actions])}
    return granted


# The objects under checkpoints, history and the ledger: the workload reaches them through
# its operations (commit, load_checkpoint, put_content...), and the S3 actions are checked.
BLOB_PRIMITIVES = {"put_blob", "put_blob_once", "get_blob", "delete_blob", "refresh_blob"}


def test_policy_grants_exactly_what_the_code_calls(aws_services: dict[str, str]) -> None:
    name = f"iam-{uuid.uuid4().hex[:8]}"
    create_resources(name, name)
    store = AwsStore(name, name)
    recorder = ActionRecorder(store)
    exercised = workload(store)
    public = (
        {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
        - {
            "close",
            "expiry",  # as record_ttl, new_record...: a policy's helper (storage.policies)
            "new_record",
            "record_ttl",
            "revived",
            "run_here",  # makes no request: the aws store runs nothing on the caller's thread
            "run_together",  # nor several calls at once
            "takeover_cutoff",
            "tombstone_until",
        }
        - BLOB_PRIMITIVES
    )
    assert public <= exercised, f"the workload misses {public - exercised}"
    granted = policy_actions(with_kms=False)
    assert recorder.actions - granted == set(), "the policy is missing these"
    assert granted - recorder.actions == set(), "the policy grants more than the code uses"
    # With a customer key: the same, plus only what SSE-KMS needs on that one key.
    kms = policy_actions(with_kms=True) - granted
    assert kms == {
        ("kms:Decrypt", "key"),
        ("kms:DescribeKey", "key"),
        ("kms:GenerateDataKey", "key"),
    }
    lifecycle = {"checkpoints/", "items/", "tools/", "files/"}
    assert all(any(k.startswith(p) for p in lifecycle) for k in recorder.s3_keys)


# -- a real deployment into moto ------------------------------------------------------------


@pytest.fixture
def moto_everything(aws_services: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    moto_url = aws_services["AWS_ENDPOINT_URL_S3"]
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDFORMATION", moto_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", moto_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_IAM", moto_url)
    yield moto_url


def deploy(stack: str, **parameters: str) -> dict[str, str]:
    """Create `stack` in moto with these parameters (and names derived from the stack's);
    returns its outputs."""
    cloudformation = boto3.client("cloudformation")
    values = {"TableName": f"{stack}-table", "BucketName": f"{stack}-bucket"} | parameters
    cloudformation.create_stack(
        StackName=stack,
        TemplateBody=TEMPLATE_PATH.read_text(),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    cloudformation.get_waiter("stack_create_complete").wait(
        StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    [description] = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in description["Outputs"]}


def test_stack_deploys_and_storage_runs_on_it(moto_everything: str) -> None:
    stack = f"bot-{uuid.uuid4().hex[:6]}"
    outputs = deploy(stack)
    assert outputs["BotTable"] == f"{stack}-table"
    assert outputs["BotBucket"] == f"{stack}-bucket"
    assert outputs["BotPolicyArn"].startswith("arn:aws:iam::")
    assert outputs["StateTtl"] == "7d"
    table = boto3.client("dynamodb").describe_table(TableName=outputs["BotTable"])["Table"]
    indexes = {index["IndexName"] for index in table["GlobalSecondaryIndexes"]}
    assert indexes == {"by_status_shard", "by_place", "by_waiting"}

    store = AwsStore(outputs["BotTable"], outputs["BotBucket"])
    lease, _ = store.acquire(KEY, "smoke", status=Status.RUNNING)
    done = store.commit(
        lease,
        state={"smoke": True},
        meta=CheckpointMeta(schema_version="1.21", agent_fingerprint="f"),
        expected_version=0,
        items=['{"role":"user","content":"hi"}'],
        base_seq=0,
    )
    store.release(lease, status=Status.AWAITING_APPROVAL)
    assert done.checkpoint is not None
    assert store.load_checkpoint(done.checkpoint) == {"smoke": True}
    assert store.read_items(KEY).items == ['{"role":"user","content":"hi"}']
    assert [r.key for r in store.list_by_status(Status.AWAITING_APPROVAL)] == [KEY]
    assert [r.key for r in store.list_paused_in(KEY.team, KEY.channel)] == [KEY]
    assert store.list_waiting_on(KEY.team, "smoke") == []  # released naming nobody


def test_stack_takes_a_longer_state_ttl(moto_everything: str) -> None:
    # moto drops the lifecycle rules, but resolving them still looks the TTL up in the map.
    assert deploy(f"bot-{uuid.uuid4().hex[:6]}", StateTtlDays="30")["StateTtl"] == "30d"
