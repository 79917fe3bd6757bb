"""The benchmarks' bots answer with the benchmark agent's own in-process model: their
environment names no model to override it (BOT_MODEL set for every child once sent the
burst and admission benchmarks' runs to api.openai.com, and no answer ever came)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bots import Bot, Sender, answers, bot_env, slack_standin
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
