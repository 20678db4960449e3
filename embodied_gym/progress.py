"""Progress bars on a terminal only; one line per logged step anywhere else.

A tqdm bar redraws its line many times a second. On a terminal that is one line; in a file (a demo
stage's ``stage.log``, CI output) every redraw is kept. So the long loops draw a bar only when asked
for (``progress``) and stderr is a terminal, and otherwise write one plain line per logged step
with :func:`report`.
"""

from __future__ import annotations

import sys


def on_terminal() -> bool:
    """Whether stderr (where tqdm draws) is a terminal."""
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


def progress_bar(iterable=None, *, progress: bool, **kwargs):
    """A tqdm bar, drawn only when ``progress`` is on and stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(iterable, disable=not (progress and on_terminal()), **kwargs)


def report(progress: bool, message: str) -> None:
    """Write ``message`` as one line on stderr when ``progress`` is on and no bar is drawn."""
    if progress and not on_terminal():
        print(message, file=sys.stderr, flush=True)
