"""Reading a thread back to find what the bot posted there, against the Web API stand-in
over HTTP (the poster's own client)."""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.runtime import ApprovalRequest, DeliveryRef, Notice, NoticeKind, PendingCall
from bot.slackapp.blocks import APPROVE
from bot.slackapp.poster import SlackPoster
from bot.standin.slack_api import SlackWebApi
from testkit.slack import CHANNEL, TEAM, running_api, thread_key


async def test_a_card_posted_after_the_thread_was_read_is_still_closed() -> None:
    """Found over two replicas: a replica that had read the thread back (for the notice
    that it resumed the run) posted the approval request, then a stop's notice: the card
    was looked for in the thread as read before it was posted, was not found, and kept its
    buttons."""
    api = SlackWebApi(team=TEAM)
    async with running_api(api) as api_url:
        poster = SlackPoster(AsyncWebClient(token="xoxb-test", base_url=f"{api_url}/api/"))
        top = api.add_user_message(CHANNEL, "UALICE", "<@UBOT> transfer 5 to bob")
        key = thread_key(top.ts)
        call = PendingCall(call_id="call-1", tool_name="transfer", arguments="{}")
        resumed = Notice(key=key, kind=NoticeKind.RESUMED_AFTER_RESTART, text="Resuming.")
        await poster(resumed, DeliveryRef(id="o1"))  # reads the thread back first
        request = ApprovalRequest(
            key=key, calls=[call], checkpoint_version=2, requested_by="UALICE"
        )
        await poster(request, DeliveryRef(id="o2"))
        stopped = Notice(key=key, kind=NoticeKind.STOPPED, text="Stopped.", settles=[call])
        await poster(stopped, DeliveryRef(id="o3"))
    [card] = [m for m in api.bot_replies(CHANNEL, top.ts) if "calls" in str(m.metadata)]
    assert APPROVE not in str(card.blocks)  # closed: "Set aside: see below."
    assert "Set aside" in str(card.blocks)
