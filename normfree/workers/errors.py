"""Trial failures: which ones are the configuration's fault, and what the public may read.

- :class:`ConfigError` is an invalid trial configuration (an unknown override, a value out of
  range, a dataset that is not registered). Running it again cannot help, so a trial that raises
  it is FAILED at once with the reason, never retried; its message is written by normfree (no
  paths, no tracebacks), so it is public as it stands.
- Any other exception from a worker is a fault whose traceback may name source paths, worker
  processes and host addresses. :func:`failure_reason` keeps it for the server log and for token
  holders, and puts in front one public line that names the exception type and a reference id
  that is also in the log line, so an operator can find the traceback from what a user reports.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """An invalid trial or study configuration; a ``ValueError`` so older callers still catch it."""


def new_reference() -> str:
    """A short random id that ties a public error line to its full text in the log."""
    return uuid.uuid4().hex[:12]


def _inner_type(text: str, fallback: str) -> str:
    """The innermost exception name of Ray's "RayTaskError(RuntimeError): ValueError: ..." text."""
    head = text.strip().splitlines()[0] if text.strip() else ""
    names = [p.strip() for p in head.split(":")[:4]]
    for name in reversed(names):
        word = name.split("(")[-1].rstrip(")").strip()
        if word.isidentifier() and (word.endswith("Error") or word.endswith("Exception")):
            return word
    return fallback


def failure_reason(attempt: int, exc: BaseException, *, trial_id: int | None = None) -> str:
    """What storage keeps for a failed attempt: one public line, then the full text.

    The public line is what anonymous readers see (:func:`public_error`); the rest of the text
    is logged here, with the same reference id, and kept for token holders.
    """
    if isinstance(exc, ConfigError):
        return f"attempt {attempt}: configuration error: {str(exc).splitlines()[0][:500]}"
    ref = new_reference()
    full = f"{type(exc).__name__}: {str(exc).strip()}"
    log.error("trial %s attempt %s failed [ref %s]: %s", trial_id, attempt, ref, full)
    kind = _inner_type(full, type(exc).__name__)
    return (
        f"attempt {attempt}: the trial failed with {kind} [ref {ref}]; the details are in the "
        f"server log\n{full[:4000]}"
    )


# host addresses (IPv4, and IPv6 with at least three groups) in stored text
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b|\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){2,7}\b", re.I)


def public_worker(worker: str | None) -> str | None:
    """A worker's id as the public sees it: stable (two trials of one worker share it) but
    opaque, since the stored id is ``host:pid`` (or a Ray node address)."""
    if not worker:
        return worker
    return "worker-" + hashlib.sha256(worker.encode()).hexdigest()[:10]


def public_error(text: str | None, worker: str | None = None) -> str | None:
    """The first line of a stored error: all an anonymous reader gets (see the module doc).

    Errors stored before the public line existed (a lost lease names its worker) may name a
    host: the trial's worker id becomes its public form and any address is masked.
    """
    if not text:
        return text
    line = text.strip().splitlines()[0][:600]
    if worker:
        line = line.replace(worker, public_worker(worker) or "")
    return _ADDRESS.sub("<host>", line)


__all__ = ["ConfigError", "failure_reason", "new_reference", "public_error", "public_worker"]
