"""Stop sequences on the text as it streams: the answer ends just before the first stop string it contains.

Text that could be the start of a stop string is held back (at most the longest stop's length minus one
character) until the next delta shows it is not; so a client never receives part of a stop string. The engine
itself has no abort: a stopped request's sequence decodes on to its max_tokens, unread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator


class StopStrings:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.num_held = max(map(len, stops), default=1) - 1
        self.text = ""
        self.num_sent = 0
        self.hit = False

    def feed(self, delta: str, final: bool) -> str:
        """The part of the text it is now safe to send; sets `hit` (and cuts `text`) at a stop string."""
        self.text += delta
        found = [index for index in (self.text.find(stop) for stop in self.stops) if index >= 0]
        if found:
            self.hit, self.text = True, self.text[: min(found)]
            upto = len(self.text)
        else:
            upto = len(self.text) if final else max(self.num_sent, len(self.text) - self.num_held)
        sent, self.num_sent = self.text[self.num_sent : upto], upto
        return sent


async def until_stop(
    deltas: AsyncIterator[tuple[str, str | None]], stops: StopStrings
) -> AsyncIterator[tuple[str, str | None]]:
    """(text, finish reason or None) as the detokenizer gives them, ended with 'stop' at a stop string."""
    async for text, reason in deltas:
        sent = stops.feed(text, final=reason is not None)
        if stops.hit:
            yield sent, "stop"
            return
        yield sent, reason
