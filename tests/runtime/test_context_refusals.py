"""A model service that refuses a request as too large (HTTP 400 `context_length_exceeded`,
OpenAI's own body, from the scripted /v1/responses server with a window smaller than the
bot was told): the request is fitted into half the budget and sent once more; refused
again, the thread is told in plain words. The real `OpenAIResponsesModel` and openai
client, over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import Agent

from bot import metrics
from bot.runtime import Answer, ConversationRuntime, Notice, NoticeKind
from bot.settings import RuntimeSettings
from storage import Status
from storage.local import LocalStore
from testkit.responses import ScriptedResponses, message, request_size, responses_server
from testkit.runtime import KEY, history, record_of


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield


def answering(window: int) -> ScriptedResponses:
    return ScriptedResponses([], respond=lambda _: [message("ok")], window=window)


def runtime(store: LocalStore, url: str, monkeypatch: pytest.MonkeyPatch) -> ConversationRuntime:
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    # No summaries: what the model is given of the history is what fits.
    settings = RuntimeSettings(model="gpt-scripted", context_tokens=3_000, summaries=False)
    return ConversationRuntime(store, Agent(name="assistant", instructions="Be brief."), settings)


async def test_a_request_refused_as_too_large_is_fitted_smaller_and_sent_again(
    local_store: LocalStore, model_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bot thinks the window holds ~6,000 bytes of input; the service takes 3,500
    characters. The third message's request is refused, then sent at half the budget."""
    script = answering(3_500)
    retried = metrics.CONTEXT_REFUSALS.labels(outcome="retried")._value.get()
    with responses_server(script) as url:
        rt = runtime(local_store, url, monkeypatch)
        for number in range(1, 4):
            text = f"message {number}: " + "words " * 200
            outcomes = await rt.handle_message(KEY, event_id=f"E{number}", user="U1", text=text)
            assert outcomes == [Answer(key=KEY, text="ok")]
    assert len(script.refused) == 1 and request_size(script.refused[0]) > 3_500
    assert all(request_size(r) <= 3_500 for r in script.requests)
    smaller = script.requests[-1]
    assert "message 3:" in str(smaller["input"][-1])
    # Fitted into half the budget: each message over its share of that is cut, visibly.
    assert request_size(smaller) < request_size(script.refused[0]) // 2 + 1_000
    assert "characters of this message left out]" in str(smaller["input"][0])
    assert metrics.CONTEXT_REFUSALS.labels(outcome="retried")._value.get() == retried + 1
    assert len(history(local_store)) == 6  # the stored history is whole


async def test_a_request_refused_twice_is_told_not_retried(
    local_store: LocalStore, model_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = answering(30)
    with responses_server(script) as url:
        rt = runtime(local_store, url, monkeypatch)
        [notice] = await rt.handle_message(KEY, event_id="E1", user="U1", text="hello there")
        assert isinstance(notice, Notice) and notice.kind is NoticeKind.TOO_LARGE
        assert "does not fit the model's context window" in notice.text
        assert "/resume" not in notice.text
        assert len(script.refused) == 2 and script.requests == []
        # Not a dead thread: it is idle, nothing of the refused request was kept.
        assert record_of(local_store, KEY).status is Status.IDLE
        assert history(local_store) == []
