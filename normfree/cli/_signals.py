"""SIGTERM and Ctrl-C for the long-running commands: a clean stop, never a dump or "Aborted!".

Two behaviours, one per kind of command (README, "Stopping"):

- ``serve``: uvicorn stops the server on SIGTERM or SIGINT (the lifespan stops the study runner
  and the embedded Ray), then raises the signal again under the handler that was installed
  before it started. :func:`exit_zero_on_signals` installs that handler: a normal exit, status 0.
- ``study run`` and ``study <kind>`` (which run the driver here): :func:`interrupt_on_signals`
  makes SIGTERM and SIGINT raise :class:`Interrupted` in the main thread, so the driver's own
  cleanup runs (cancel and hand back its running trials), then the command stops Ray and exits
  with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM): the study is not done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """A stop asked by a signal (``signum``) while a study was being driven here."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_zero_on_signals() -> None:
    """SIGTERM and SIGINT end this process with status 0 (for ``serve``; see the module doc)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def _exit(_signum: int, _frame: Any) -> None:
        raise SystemExit(0)

    for sig in HANDLED:
        signal.signal(sig, _exit)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[list[int]]:
    """While the block runs, the first SIGTERM or SIGINT raises :class:`Interrupted`.

    Yields the list of signals received (the first one only). Later ones are ignored until the
    block ends: the cleanup a first signal starts (handing trials back, stopping Ray) is not
    itself interrupted half way. Ray's C code may turn the exception into a plain
    ``KeyboardInterrupt`` on its way up: the list says which signal it was.
    """
    fired: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield fired
        return

    def _interrupt(signum: int, _frame: Any) -> None:
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    old = {sig: signal.signal(sig, _interrupt) for sig in HANDLED}
    try:
        yield fired
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
