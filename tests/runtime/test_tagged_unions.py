"""The OpenAI client's tagged unions validated by the member a value names
(`bot.runtime.tagged_unions`): the same objects as the client's own whole-union validation,
without it for every value that names its member."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, get_args

import openai._models as client_models
import pytest
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent
from pydantic import BaseModel, ValidationError

from bot.runtime.tagged_unions import (
    CLIENT_VALIDATE,
    by_named_member,
    client_validate,
    install,
    members_by_tag,
    named_member,
    unwrapped,
    validating_by_tag,
)
from testkit.responses import USAGE, message, tool_call

# The unions as the client validates them (out of their `Annotated[Union[...], ...]`).
STREAM_UNION: Any = get_args(ResponseStreamEvent)[0]
OUTPUT_UNION: Any = get_args(ResponseOutputItem)[0]


def response(output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "model": "gpt-scripted",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": USAGE if status == "completed" else None,
    }


def streamed_events() -> Iterator[dict[str, Any]]:
    """What a streamed answer and a streamed tool call are made of, as the service sends
    them (the scripted `/v1/responses` server's events)."""
    answer, call = message("echo: hello there"), tool_call("lookup", {"topic": "x"}, "call_1")
    yield {"type": "response.created", "response": response([], "in_progress")}
    yield {"type": "response.in_progress", "response": response([], "in_progress")}
    opening = {**answer, "status": "in_progress", "content": []}
    yield {"type": "response.output_item.added", "output_index": 0, "item": opening}
    for word in ("echo: ", "hello ", "there"):
        yield {
            "type": "response.output_text.delta",
            "item_id": answer["id"],
            "output_index": 0,
            "content_index": 0,
            "delta": word,
            "logprobs": [],
        }
    yield {"type": "response.output_item.done", "output_index": 0, "item": answer}
    yield {"type": "response.output_item.added", "output_index": 1, "item": call}
    yield {"type": "response.output_item.done", "output_index": 1, "item": call}
    yield {"type": "response.completed", "response": response([answer, call], "completed")}


def numbered(events: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def the_clients_own() -> Any:
    validate = client_validate()
    assert validate is not None
    return unwrapped(validate)


def test_every_streamed_event_and_output_item_is_named_by_its_tag() -> None:
    for union in (STREAM_UNION, OUTPUT_UNION):
        by_tag = members_by_tag(union)
        assert by_tag is not None
        assert sorted(by_tag.values(), key=id) == sorted(get_args(union), key=id)
    assert len(get_args(STREAM_UNION)) > 50


def test_a_union_whose_members_share_a_tag_or_have_none_is_not_tagged() -> None:
    class Kind(BaseModel):
        type: Literal["a"]

    class Twin(BaseModel):
        type: Literal["a"]

    class Loose(BaseModel):
        type: str

    class Either(BaseModel):
        type: Literal["b", "c"]

    assert members_by_tag(Kind | Twin) is None
    assert members_by_tag(Kind | Loose) is None
    assert members_by_tag(Kind | Either) is None
    assert members_by_tag(Kind | str) is None
    assert members_by_tag(Kind) is None
    assert members_by_tag(Kind | Either | None) is None


def test_each_event_comes_out_as_the_clients_whole_union_makes_it() -> None:
    union = STREAM_UNION
    original = the_clients_own()
    for event in numbered(streamed_events()):
        whole: Any = original(type_=union, value=event)
        assert named_member(union, event) is type(whole)
        by_member = by_named_member(original)(type_=union, value=event)
        assert type(by_member) is type(whole)
        assert by_member.model_dump() == whole.model_dump()
        assert by_member == whole


def test_a_named_member_is_validated_alone() -> None:
    union = STREAM_UNION
    asked: list[Any] = []

    def whole_union(*, type_: Any, value: object) -> Any:
        asked.append(type_)
        raise AssertionError("validated against the whole union")

    validate = by_named_member(whole_union)
    events = numbered(streamed_events())
    parsed = [validate(type_=union, value=event) for event in events]
    assert asked == []
    assert [event.type for event in parsed] == [event["type"] for event in events]


def test_what_names_no_member_or_is_refused_by_it_goes_the_clients_way() -> None:
    union = STREAM_UNION
    original = the_clients_own()
    asked: list[Any] = []

    def whole_union(*, type_: Any, value: object) -> Any:
        asked.append(value)
        return original(type_=type_, value=value)

    validate = by_named_member(whole_union)
    model_name: Any = str | Literal["gpt-scripted"]
    assert validate(type_=model_name, value="gpt-scripted") == "gpt-scripted"
    with pytest.raises(ValidationError):  # a tag no member has
        validate(type_=union, value={"type": "response.unheard_of", "sequence_number": 1})
    with pytest.raises(ValidationError):  # a member's tag, without that member's fields
        validate(type_=union, value={"type": "response.output_text.delta"})
    assert len(asked) == 3


def test_installed_the_client_parses_events_by_their_named_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = the_clients_own()
    monkeypatch.setattr(client_models, CLIENT_VALIDATE, original)
    assert install()
    assert install()  # once
    wrapped = client_validate()
    assert wrapped is not original
    assert wrapped is not None and unwrapped(wrapped) is original
    events = numbered(streamed_events())
    parsed = [
        client_models.construct_type(value=event, type_=ResponseStreamEvent) for event in events
    ]
    expected = [original(type_=STREAM_UNION, value=event) for event in events]
    assert parsed == expected


def test_without_the_function_it_wraps_nothing_is_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(client_models, CLIENT_VALIDATE)
    assert not install()
    assert client_validate() is None


def test_validating_by_tag_holds_for_the_block_either_way_and_is_undone_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = the_clients_own()
    monkeypatch.setattr(client_models, CLIENT_VALIDATE, original)
    with validating_by_tag():
        ours = client_validate()
        assert ours is not None and ours is not original and unwrapped(ours) is original
        with validating_by_tag(on=False):
            assert client_validate() is original
        assert client_validate() is ours
    assert client_validate() is original
    assert install()
    installed = client_validate()
    with pytest.raises(RuntimeError), validating_by_tag(on=False):
        assert client_validate() is original
        raise RuntimeError("a failed measurement")
    assert client_validate() is installed
    with validating_by_tag():
        assert client_validate() is installed  # already ours: kept as it is


def test_validating_by_tag_changes_nothing_without_the_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(client_models, CLIENT_VALIDATE)
    with validating_by_tag():
        assert client_validate() is None
