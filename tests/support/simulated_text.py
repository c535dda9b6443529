"""The text the simulated provider writes, as tests expect it."""

from __future__ import annotations

from jobstream.worker.providers.simulated import Pattern, token_text


def expected_text(prompt: str, tokens: int, pattern: Pattern = "words") -> str:
    """The whole output of a successful attempt producing `tokens` tokens."""
    return "".join(token_text(prompt, pattern, i) for i in range(tokens))
