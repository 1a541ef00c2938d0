"""Completion ids to text deltas as they arrive, for the server's streaming answers.

Each new token re-decodes the whole completion and sends the text past what was already sent: decoded one at a
time, the byte-level tokens of a character that spans several would each come out broken. A text ending in
U+FFFD is such a half character; it waits for the next token, unless this was the last one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator


class Detokenizer:
    """Turns the growing list of completion ids into text deltas; holds back a half-decoded character."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.token_ids: list[int] = []
        self.text = ""

    def push(self, token_id: int, final: bool) -> str:
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if text.endswith("\ufffd") and not final:
            return ""
        delta, self.text = text[len(self.text) :], text
        return delta

    async def deltas(self, tokens: AsyncIterator[tuple[int, str | None]]) -> AsyncIterator[tuple[str, str | None]]:
        """(text delta, finish reason or None) for each (token id, finish reason or None)."""
        async for token_id, reason in tokens:
            yield self.push(token_id, final=reason is not None), reason
