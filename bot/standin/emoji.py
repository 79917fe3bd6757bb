"""Slack's emoji shortcodes as the page draws them (Slack shows `:repeat:` as 🔁): every code
the bot writes in its messages and reactions (a test reads them off the bot's source), and
the common ones people and models write. A code not here is shown as written, as Slack
shows one it does not know."""

from __future__ import annotations

import json

SHORTCODES = {
    # what the bot writes (bot/slackapp: notices, closed approval cards, reactions)
    "arrows_counterclockwise": "🔄",
    "electric_plug": "🔌",
    "eyes": "👀",
    "grey_question": "❔",
    "heavy_minus_sign": "➖",  # noqa: RUF001 (the emoji, not a minus)
    "hourglass": "⌛",
    "hourglass_flowing_sand": "⏳",
    "inbox_tray": "📥",
    "information_source": "ℹ️",  # noqa: RUF001 (the emoji, not an i)
    "no_entry_sign": "🚫",
    "octagonal_sign": "🛑",
    "paperclip": "📎",
    "raised_hand": "✋",
    "repeat": "🔁",
    "shield": "🛡️",
    "straight_ruler": "📏",
    "thumbsdown": "👎",
    "thumbsup": "👍",
    "warning": "⚠️",
    "wastebasket": "🗑️",
    "white_check_mark": "✅",
    "x": "❌",
    # common in what people and models write
    "+1": "👍",
    "-1": "👎",
    "bulb": "💡",
    "calendar": "📆",
    "clap": "👏",
    "heavy_check_mark": "✔️",
    "heart": "❤️",
    "hourglass_done": "⌛",
    "lock": "🔒",
    "memo": "📝",
    "ok_hand": "👌",
    "pray": "🙏",
    "rocket": "🚀",
    "slightly_smiling_face": "🙂",
    "smile": "😄",
    "sparkles": "✨",
    "star": "⭐",
    "tada": "🎉",
    "thinking_face": "🤔",
    "wave": "👋",
    "wrench": "🔧",
}


def shortcodes_script() -> str:
    """The table as a JavaScript object literal for the page (no `<` that could end its
    script element)."""
    return json.dumps(SHORTCODES, ensure_ascii=False).replace("<", "\\u003c")
