"""bolt's authorization of a request from its workspace's kept installation, told apart
from storage that cannot be read (`oauth.installs` builds it)."""

from __future__ import annotations

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import (
    AsyncAuthorize,
    AsyncInstallationStoreAuthorize,
)
from slack_bolt.context.async_context import AsyncBoltContext

from bot.slackapp.installations import StoredInstallations


class InstalledOrUnavailable(AsyncAuthorize):
    """bolt's authorization from the kept installations, except that storage it could not
    read is not "not installed". bolt's swallows a failed `find_bot` and answers "your
    installation with this app is no longer available" with a 200, so Slack never delivers
    the message or click again: it was lost (a stop, in the chaos soak, aws seed 620241).
    Where bolt's finds nothing, the installation is looked up once more without it: storage
    that is down raises, and the request fails with a 500 (`app.on_error`) that Slack
    retries; only a workspace truly without an installation gets bolt's answer."""

    def __init__(
        self, found_by: AsyncInstallationStoreAuthorize, installations: StoredInstallations
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.found_by = found_by
        self.installations = installations

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        found = await self.found_by(
            context=context,
            enterprise_id=enterprise_id,
            team_id=team_id,
            user_id=user_id,
            actor_enterprise_id=actor_enterprise_id,
            actor_team_id=actor_team_id,
            actor_user_id=actor_user_id,
        )
        if found is None:  # raises StorageUnavailable where bolt's saw nothing for it
            await self.installations.async_find_bot(
                enterprise_id=enterprise_id,
                team_id=team_id,
                is_enterprise_install=context.is_enterprise_install,
            )
        return found
