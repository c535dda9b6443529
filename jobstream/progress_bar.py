"""A job's `progress` events on stderr: a bar redrawn in place on a terminal, lines elsewhere.

The bar must never damage the text a follow streams. When that text shares the terminal and has
stopped mid-line, a bar drawn with a carriage return would overwrite it; so there the bar goes
on the line below (made first, so that drawing it scrolls nothing) and the cursor returns to
the text. Before any other output the bar is erased, and the next event draws it again.
"""

from __future__ import annotations

import os
from typing import TextIO

CELLS = 20  # the bar's width, brackets aside
ERASE_LINE_END = "\x1b[K"
# IND and RI move down and up a line keeping the column (scrolling at the edge), unlike "\n",
# which the terminal driver turns into CR LF; DECSC/DECRC save and restore the cursor.
DOWN, UP, SAVE, RESTORE = "\x1bD", "\x1bM", "\x1b7", "\x1b8"
# With autowrap off, a bar too wide for the screen (wide characters) is cut, never wrapped
# onto a line that a redraw in place would then leave behind.
NO_WRAP, WRAP = "\x1b[?7l", "\x1b[?7h"


def describe(fraction: float, message: str | None) -> str:
    """`40% thinking`: the percentage, floored (100% only at 1.0), and the message on one line."""
    percent = _floor(fraction, 100)
    # The job's own text: control characters (a newline, an escape) would break the line.
    note = " ".join("".join(c if c.isprintable() else " " for c in message or "").split())
    return f"{percent}% {note}".rstrip()


class ProgressDisplay:
    def __init__(self, err: TextIO, *, text_on_screen: bool) -> None:
        """`text_on_screen`: the followed text goes to the same terminal as `err`."""
        self._err = err
        self.terminal = err.isatty()
        self._text_on_screen = text_on_screen and self.terminal
        self._shown: str | None = None  # the bar on screen, or the last plain line
        self._below = False  # the bar is on the line under the text's unfinished one

    def show(self, fraction: float, message: str | None, *, mid_line: bool) -> None:
        """`mid_line`: the text written so far does not end with a newline."""
        if not self.terminal:
            line = f"progress {describe(fraction, message)}"
            if line != self._shown:  # a job reporting often repeats itself: one line a change
                self._err.write(line + "\n")
                self._err.flush()
                self._shown = line
            return
        filled = _floor(fraction, CELLS)
        bar = f"[{'#' * filled}{'.' * (CELLS - filled)}] {describe(fraction, message)}"
        bar = bar[: _columns(self._err) - 1]
        if bar == self._shown:
            return
        below = self._text_on_screen and mid_line
        if below != self._below:
            self.clear()
        if below:
            draw = DOWN + UP + SAVE + DOWN + "\r"
            end = RESTORE
        else:
            draw, end = "\r", ""
        self._err.write(f"{draw}{NO_WRAP}{bar}{ERASE_LINE_END}{WRAP}{end}")
        self._err.flush()
        self._shown, self._below = bar, below

    def start_over(self) -> None:
        """A new attempt began: its progress is news even where it repeats the last one's."""
        self.clear()
        self._shown = None

    def clear(self) -> None:
        """Erase the bar, if one is showing, so that what comes next writes on a clean line."""
        if not self.terminal or self._shown is None:
            return
        if self._below:
            self._err.write(f"{SAVE}{DOWN}\r{ERASE_LINE_END}{RESTORE}")
        else:
            self._err.write(f"\r{ERASE_LINE_END}")
        self._err.flush()
        self._shown, self._below = None, False


def _floor(fraction: float, steps: int) -> int:
    """The whole steps done, rounded first: 0.29 * 100 is 28.999999999999996, 29 percent."""
    return int(round(min(max(fraction, 0.0), 1.0) * steps, 6))


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):  # not a real terminal (io.UnsupportedOperation is both)
        return 80
