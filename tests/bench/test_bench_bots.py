"""The benchmarks' bots answer with the benchmark agent's own in-process model: their
environment names no model to override it (BOT_MODEL set for every child once sent the
burst and admission benchmarks' runs to api.openai.com, and no answer ever came)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agents import Runner

from bench.bots import Bot, Sender, answers, bot_env, slack_standin
from bench.burst import Plain, burst_on
from bench.responses_agent import build_agent, model_server
from testkit.child_env import child_bot_env

pytestmark = pytest.mark.slow


def test_only_a_bot_of_the_scripted_server_names_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_MODEL", "from-the-outer-shell")
    assert "BOT_MODEL" not in child_bot_env({})
    assert child_bot_env({}, model_url="http://127.0.0.1:1")["BOT_MODEL"] == "gpt-scripted"


async def test_a_bench_bot_answers_a_small_burst(tmp_path: Path) -> None:
    storage = {"BOT_STORAGE": "local", "BOT_DATA_DIR": str(tmp_path / "data")}
    async with slack_standin() as (api, api_url):
        bot = Bot(bot_env(api_url, storage), tmp_path / "bot.log")
        bot.start()
        try:
            await bot.wait_healthy()
            sender = Sender(api)
            try:
                acks = await sender.burst(bot, [f"burst {i}" for i in range(3)])
                assert len(acks) == 3
                await api.wait_for(lambda: len(answers(api)) >= 3, within=60)
            finally:
                await sender.close()
        finally:
            await bot.stop()


async def test_the_scripted_model_serves_a_burst_of_calls_at_once() -> None:
    """The plain bot of the burst bench starts every run at once: the scripted server
    takes them all (its listen backlog was 5, and most of a burst's connections were
    reset)."""
    with model_server() as url:
        agent = build_agent(url)
        results = await asyncio.gather(*(Runner.run(agent, f"hello {i}") for i in range(150)))
    assert [str(r.final_output) for r in results] == [f"echo: hello {i}" for i in range(150)]


@pytest.mark.parametrize("listener", ["agent", "none"])
async def test_the_plain_bot_and_bolt_alone_take_a_burst(tmp_path: Path, listener: str) -> None:
    storage = {"BOT_DATA_DIR": str(tmp_path / "data")}
    with model_server() as url:
        found = await burst_on(storage, 20, 1, tmp_path, plain=Plain(url, listener))
    (round_,) = found["rounds"]
    answered = round_["web_api_methods"].get("chat.postMessage", 0)
    assert answered == (20 if listener == "agent" else 0)
    assert round_["max"] < 30_000
