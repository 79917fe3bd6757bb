"""DynamoDB update expressions (`storage.aws.expressions.Update`): every placeholder is
defined and every defined one is used, since DynamoDB rejects an expression otherwise."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from storage.aws.expressions import Update, n, s, ss

KEY = {"pk": s("CONV#T1:C1:1.0"), "sk": s("META")}


def used(expression: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The name and value placeholders that the expression's strings mention."""
    text = " ".join(
        str(expression.get(field, "")) for field in ("UpdateExpression", "ConditionExpression")
    )
    return set(re.findall(r"#\w+", text)), set(re.findall(r":\w+", text))


def assert_placeholders_match(expression: Mapping[str, Any]) -> None:
    names, values = used(expression)
    assert names == set(expression["ExpressionAttributeNames"])
    assert values == set(expression.get("ExpressionAttributeValues", {}))


def test_attribute_values() -> None:
    assert s("x") == {"S": "x"}
    assert n(3) == {"N": "3"} and n(1.5) == {"N": "1.5"}
    assert ss(["b", "a", "b"]) == {"SS": ["a", "b"]}


def test_set_names_the_attribute_and_its_value() -> None:
    update = Update()
    update.set("conv_status", s("idle"))
    assert update.expression() == {
        "UpdateExpression": "SET #conv_status = :conv_status",
        "ExpressionAttributeNames": {"#conv_status": "conv_status"},
        "ExpressionAttributeValues": {":conv_status": {"S": "idle"}},
    }


def test_every_kind_of_clause_together_uses_exactly_its_placeholders() -> None:
    update = Update()
    update.set("updated_ms", n(5))
    update.set_if_missing("created_ms", n(1))
    update.increment("inbox_seq")
    update.remove("lease_owner")
    update.add_to_set("participants", ss(["U1"]))
    update.fenced(3, "owner-a")
    update.require("attribute_exists(pk)")
    expression = update.expression()
    assert expression["UpdateExpression"] == (
        "SET #updated_ms = :updated_ms, "
        "#created_ms = if_not_exists(#created_ms, :init_created_ms), "
        "#inbox_seq = if_not_exists(#inbox_seq, :zero) + :one "
        "REMOVE #lease_owner "
        "ADD #participants :participants"
    )
    assert expression["ConditionExpression"] == (
        "(#fence = :fence AND #lease_owner = :lease_owner) AND (attribute_exists(pk))"
    )
    assert_placeholders_match(expression)


def test_set_if_missing_after_set_adds_nothing() -> None:
    update = Update()
    update.set("conv_status", s("running"))
    update.set_if_missing("conv_status", s("idle"))
    expression = update.expression()
    assert expression["UpdateExpression"] == "SET #conv_status = :conv_status"
    assert expression.get("ExpressionAttributeValues") == {":conv_status": {"S": "running"}}
    assert_placeholders_match(expression)


def test_set_if_missing_alone_initialises() -> None:
    update = Update()
    update.set_if_missing("fence", n(0))
    update.set_if_missing("fence", n(9))  # the first one counts
    expression = update.expression()
    assert expression["UpdateExpression"] == "SET #fence = if_not_exists(#fence, :init_fence)"
    assert expression.get("ExpressionAttributeValues") == {":init_fence": {"N": "0"}}


def test_an_empty_update_has_no_expression_and_no_values() -> None:
    assert Update().expression() == {"ExpressionAttributeNames": {}}


def test_as_update_is_a_transaction_action() -> None:
    update = Update()
    update.set("fence", n(2))
    update.fenced(1, "owner-a")
    action = update.as_update("table", KEY)
    assert action["TableName"] == "table" and action["Key"] == KEY
    assert action["UpdateExpression"] == "SET #fence = :fence"
    assert action["ConditionExpression"] == "(#fence = :fence AND #lease_owner = :lease_owner)"
    assert action["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    assert_placeholders_match(action)


def test_as_update_without_values_or_condition_leaves_them_out() -> None:
    update = Update()
    update.remove("lease_owner")
    action = update.as_update("table", KEY)
    assert action["UpdateExpression"] == "REMOVE #lease_owner"
    assert "ExpressionAttributeValues" not in action and "ConditionExpression" not in action


def test_as_condition_check_is_only_the_condition() -> None:
    update = Update()
    update.fenced(4, "owner-b")
    check = update.as_condition_check("table", KEY)
    assert check == {
        "TableName": "table",
        "Key": KEY,
        "ConditionExpression": "(#fence = :fence AND #lease_owner = :lease_owner)",
        "ExpressionAttributeNames": {"#fence": "fence", "#lease_owner": "lease_owner"},
        "ExpressionAttributeValues": {":fence": {"N": "4"}, ":lease_owner": {"S": "owner-b"}},
    }
    assert "UpdateExpression" not in check
    assert_placeholders_match(check)


def test_a_condition_check_without_a_condition_checks_that_the_item_exists() -> None:
    check = Update().as_condition_check("table", KEY)
    assert check["ConditionExpression"] == "attribute_exists(pk)"
    assert "ExpressionAttributeValues" not in check
