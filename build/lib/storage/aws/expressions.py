"""DynamoDB request pieces: attribute values, and update expressions built with their names
and values, without unused placeholders (DynamoDB rejects those). Pure: testable without a
table."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import (
        AttributeValueTypeDef,
        ConditionCheckTypeDef,
        UpdateTypeDef,
    )

    Value = AttributeValueTypeDef
else:
    Value = dict

Item = dict[str, "Value"]
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


def s(value: str) -> Value:
    return {"S": value}


def n(value: int | float) -> Value:
    return {"N": str(value)}


def ss(values: Iterable[str]) -> Value:
    return {"SS": sorted(set(values))}


class Expression(TypedDict, total=False):
    UpdateExpression: str
    ConditionExpression: str
    ExpressionAttributeNames: dict[str, str]
    ExpressionAttributeValues: dict[str, Value]


class Update:
    """Builds an UpdateExpression (SET, REMOVE, ADD) with a condition."""

    def __init__(self) -> None:
        self.sets: list[str] = []
        self.removes: list[str] = []
        self.adds: list[str] = []
        self.conditions: list[str] = []
        self.names: dict[str, str] = {}
        self.values: dict[str, Value] = {}
        self.assigned: set[str] = set()

    def name(self, attribute: str) -> str:
        """The placeholder for `attribute` (placeholders allow only letters, digits, `_`)."""
        placeholder = f"#{attribute}"
        if not _PLAIN.fullmatch(attribute):
            digest = hashlib.blake2b(attribute.encode(), digest_size=6).hexdigest()
            placeholder = f"#x{digest}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, label: str, value: Value) -> str:
        self.values[f":{label}"] = value
        return f":{label}"

    def set(self, attribute: str, value: Value) -> None:
        self.assigned.add(attribute)
        self.sets.append(f"{self.name(attribute)} = {self.value(attribute, value)}")

    def set_if_missing(self, attribute: str, value: Value) -> None:
        """Initialise `attribute` unless it exists (or this update already sets it)."""
        if attribute in self.assigned:
            return
        self.assigned.add(attribute)
        name = self.name(attribute)
        placeholder = self.value(f"init_{attribute}", value)
        self.sets.append(f"{name} = if_not_exists({name}, {placeholder})")

    def increment(self, attribute: str) -> None:
        self.assigned.add(attribute)
        name = self.name(attribute)
        self.values |= {":zero": n(0), ":one": n(1)}
        self.sets.append(f"{name} = if_not_exists({name}, :zero) + :one")

    def add_to_set(self, attribute: str, value: Value) -> None:
        """ADD: a set's members, or a number to a number (a counter)."""
        self.adds.append(f"{self.name(attribute)} {self.value(attribute, value)}")

    def remove(self, attribute: str) -> None:
        self.removes.append(self.name(attribute))

    def require(self, condition: str) -> None:
        self.conditions.append(f"({condition})")

    def fenced(self, fence: int, owner: str) -> None:
        self.require(
            f"{self.name('fence')} = {self.value('fence', n(fence))} AND "
            f"{self.name('lease_owner')} = {self.value('lease_owner', s(owner))}"
        )

    def expression(self) -> Expression:
        parts = []
        if self.sets:
            parts.append("SET " + ", ".join(self.sets))
        if self.removes:
            parts.append("REMOVE " + ", ".join(self.removes))
        if self.adds:
            parts.append("ADD " + ", ".join(self.adds))
        out: Expression = {"ExpressionAttributeNames": self.names}
        if parts:
            out["UpdateExpression"] = " ".join(parts)
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        if self.conditions:
            out["ConditionExpression"] = " AND ".join(self.conditions)
        return out

    def as_update(self, table: str, key: Mapping[str, Value]) -> UpdateTypeDef:
        """This update as one action of a transaction (returning the item on failure)."""
        expression = self.expression()
        update: UpdateTypeDef = {
            "TableName": table,
            "Key": key,
            "UpdateExpression": expression.get("UpdateExpression", ""),
            "ExpressionAttributeNames": expression["ExpressionAttributeNames"],
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if "ExpressionAttributeValues" in expression:
            update["ExpressionAttributeValues"] = expression["ExpressionAttributeValues"]
        if "ConditionExpression" in expression:
            update["ConditionExpression"] = expression["ConditionExpression"]
        return update

    def as_condition_check(self, table: str, key: Mapping[str, Value]) -> ConditionCheckTypeDef:
        """Only this update's condition, as a transaction's ConditionCheck."""
        expression = self.expression()
        check: ConditionCheckTypeDef = {
            "TableName": table,
            "Key": key,
            "ConditionExpression": expression.get("ConditionExpression", "attribute_exists(pk)"),
            "ExpressionAttributeNames": expression["ExpressionAttributeNames"],
        }
        if "ExpressionAttributeValues" in expression:
            check["ExpressionAttributeValues"] = expression["ExpressionAttributeValues"]
        return check
