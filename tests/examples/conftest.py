from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The examples as local mode runs them without OPENAI_API_KEY: on their offline model,
    at once; their files (refunds, payments) in the returned BOT_DATA_DIR."""
    monkeypatch.setenv("BOT_DEMO_MODEL", "1")
    monkeypatch.setenv("BOT_DEMO_DELAY", "0")
    monkeypatch.setenv("BOT_DEMO_WORD_DELAY", "0")
    monkeypatch.setenv("BOT_DATA_DIR", str(tmp_path / "files"))
    monkeypatch.delenv("PAYMENTS_URL", raising=False)
    return tmp_path / "files"
