"""The model's view of a thread, fitted into the model's window before every model request.

`ModelInputFilter` is the runs' `call_model_input_filter` (the SDK calls it before each model
request; it changes what the model is sent, never what the session stores): it waits at the
replica's 429 gate (`rate_gate`), puts shared files' bytes back in (`attachments`), and fits
the input into the model's budget (`fitting`), with the run's `RunView` (the thread's summary
and the count of earlier messages left out) ahead of it. What the view holds is decided when
a run starts (`summaries.open_window`) and kept in the run's checkpoints (`envelope.RunWindow`), so
that a resumed run, on any replica, is given the same requests.

`ContextWindow` is the runtime's one instance of what this needs: the budget per model, and
the summaries it knows (the latest one of each conversation, stored or just made)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

from agents import Agent, TResponseInputItem
from agents.run_config import CallModelData, ModelInputData

from bot import metrics
from bot.runtime.attachments import SharedFiles
from bot.runtime.envelope import RunWindow
from bot.runtime.fitting import Fitted, TooLarge, fit
from bot.runtime.rate_gate import RateGate
from bot.runtime.window_budget import Budget, agent_tools_size, model_name
from bot.settings import RuntimeSettings
from storage import Conversation, ConversationKey, Summary
from storage.calls import StorageCalls

log = logging.getLogger(__name__)
KNOWN_SUMMARIES = 256  # conversations whose latest summary is kept in memory


@dataclass(frozen=True)
class RunView:
    """What stands, in a run's model requests, for the turns before its history."""

    summary: str | None = None
    left_out: int = 0
    reads: int | None = None  # session items the run reads when it starts (None: its limit)


@dataclass(frozen=True)
class MadeSummary:
    """A summary, and the one it folded in (by its `through`; 0: none)."""

    summary: Summary
    base: int


@dataclass(frozen=True)
class OpenWindow:
    """What a fresh run is given of the history (`summaries.open_window`)."""

    view: RunView  # what the run is given of the history
    window: RunWindow  # what its checkpoints say of it
    made: Summary | None  # a summary made for it, for the serve's next commit to store


class ContextWindow:
    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._known: OrderedDict[tuple[ConversationKey, int], MadeSummary] = OrderedDict()

    # -- budgets and fitting ------------------------------------------------------------

    def budget_for(self, model: str | None) -> Budget:
        if model is None:
            from agents.models import get_default_model

            model = get_default_model()
        return Budget.for_model(model, self.settings.context_tokens)

    def budget_of(self, agent: Agent[Any]) -> Budget:
        return self.budget_for(model_name(agent, self.settings.model))

    def room_for(self, agent: Agent[Any], instructions: str | None) -> int:
        return self.budget_of(agent).room(instructions, agent_tools_size(agent))

    def fitted(self, data: ModelInputData, agent: Agent[Any], view: RunView) -> ModelInputData:
        room = self.room_for(agent, data.instructions)
        try:
            fitted = fit(data.input, room, summary=view.summary, left_out=view.left_out)
        except TooLarge:
            metrics.CONTEXT_REFUSALS.labels(outcome="too_large").inc()
            raise
        _count(fitted, view)
        given = cast(list[TResponseInputItem], fitted.input)
        return ModelInputData(input=given, instructions=data.instructions)

    # -- summaries ----------------------------------------------------------------------

    def known(self, record: Conversation) -> MadeSummary | None:
        return self._known.get((record.key, record.generation))

    def remember(self, record: Conversation, made: MadeSummary) -> None:
        self._known[(record.key, record.generation)] = made
        self._known.move_to_end((record.key, record.generation))
        while len(self._known) > KNOWN_SUMMARIES:
            self._known.popitem(last=False)

    async def summary_of(self, storage_calls: StorageCalls, record: Conversation) -> Summary | None:
        """The summary `record` names (read once, then known), or None."""
        if record.summary_seq == 0:
            return None
        found = self.known(record)
        if found is not None and found.summary.through == record.summary_seq:
            return found.summary
        summary = await storage_calls(storage_calls.store.read_summary, record)
        if summary is None:
            log.warning("%s: its summary is gone; going on without it", record.key)
            return None
        self.remember(record, MadeSummary(summary, base=0))
        return summary


def _count(fitted: Fitted, view: RunView) -> None:
    if fitted.cut:
        metrics.CONTEXT_TRIMMED.labels(what="cut").inc()
    if fitted.left_out > view.left_out:
        metrics.CONTEXT_TRIMMED.labels(what="left_out").inc()


class ModelInputFilter:
    """The runs' `call_model_input_filter`: the 429 gate, shared files, then the fit (with
    `view`; without a `window`, no fit)."""

    def __init__(
        self,
        files: SharedFiles,
        gate: RateGate | None,
        window: ContextWindow | None,
        view: RunView | None = None,
    ) -> None:
        self.files = files
        self.gate = gate
        self.window = window
        self.view = view or RunView()

    def with_view(self, view: RunView) -> ModelInputFilter:
        return ModelInputFilter(self.files, self.gate, self.window, view)

    def unfitted(self) -> ModelInputFilter:
        return ModelInputFilter(self.files, self.gate, None)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        if self.gate is not None:
            await self.gate.wait()
        resolved = await self.files.resolve(data)
        if self.window is None:
            return resolved
        return self.window.fitted(resolved, data.agent, self.view)
