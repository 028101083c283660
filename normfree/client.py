"""A Python client for a normfree server: studies, trials, arms and leaderboards as data frames.

    from normfree import Client

    nf = Client("http://127.0.0.1:8000", token="...")        # the token only for writes
    study = nf.create_study(kind="property", proxy="vit-tiny", functions=["erf", "tanh"],
                            transform="shift_h", values=[-1, 0, 1], seeds=3)
    nf.wait(study["id"])                                      # a progress bar until it ends
    trials = nf.to_dataframe("trials", study["id"])           # config, metrics, diagnostics
    arms = nf.to_dataframe("arms", study["id"])               # mean and CI per arm
    board = nf.to_dataframe("leaderboard", "vit-tiny")
    curves = nf.to_dataframe("curves", study["id"])           # a row per trial, epoch, metric
    nf.delete_study(study["id"], dry_run=True)["removes"]     # what a delete would remove
    nf.tag_study(study["id"], "paper"); nf.archive_arm(study["id"], arm_key)

It speaks the REST API over HTTP (httpx) and nothing else, so a notebook needs no database
access and no torch. The tables are the server's exports (``?format=parquet``, or CSV where
pyarrow is missing), so a data frame has the same columns and numbers as ``normfree export``
and the JSON. Errors are :class:`ClientError` with the server's status, code and sentence.

Storing a trial trained in the notebook (``train_trial``) is :func:`normfree.record_trial`,
which writes the database directly: the API takes results only from its own workers.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

import httpx

if TYPE_CHECKING:
    import pandas as pd

What = Literal["trials", "arms", "leaderboard", "curves"]
# Statuses a study does not leave by itself: wait() returns at them.
SETTLED = ("complete", "failed", "cancelled", "paused")


class ClientError(RuntimeError):
    """The server refused a request: ``status`` (HTTP), ``error`` (its code), the message."""

    def __init__(self, status: int, error: str, message: str, detail: Any = None) -> None:
        super().__init__(f"{status} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.detail = detail


def _postfix(state: str, progress: dict[str, Any]) -> str:
    """The bar's words: the state, the server's ETA and the best arm so far, when known."""
    words = [state]
    if progress.get("eta_s") is not None:
        words.append(f"ETA {progress['eta_s']:.0f} s")
    best = progress.get("best")
    if best:
        words.append(f"best {best['label']} {best['mean']:.4g} (n={best['n']})")
    return ", ".join(words)


def _segment(text: str) -> str:
    """``text`` as one URL path segment (a candidate's name may hold ``/`` or ``?``)."""
    return quote(text, safe="")


class Client:
    """A normfree server at ``url``. ``token``: a write token (``normfree token create``), sent
    only where it matters to the server (creating and steering studies; reads, unless the
    server keeps them private). ``http``: an ``httpx.Client`` to use instead of a new one
    (a test's client of the app, a proxy's settings); its base URL is then the server's."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        token: str | None = None,
        *,
        timeout: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._own = http is None
        self.http = http or httpx.Client(base_url=url.rstrip("/"), timeout=timeout)
        self._headers = headers

    def close(self) -> None:
        """Close the connection pool (when this client made it)."""
        if self._own:
            self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {**self._headers, **kw.pop("headers", {})}
        r = self.http.request(method, path, headers=headers, **kw)
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            raise ClientError(
                r.status_code,
                str(body.get("error") or r.reason_phrase),
                str(body.get("message") or r.text[:500]),
                body.get("detail"),
            )
        return r

    def _get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=clean).json()

    # -- studies ----------------------------------------------------------------------------

    def create_study(self, **spec: Any) -> dict[str, Any]:
        """Create a study (the fields of ``POST /api/studies``: kind, proxy, functions, seeds,
        ...); the server plans it and runs it in the background. Its public row, with ``id``."""
        return self._request("POST", "/api/studies", json=spec).json()

    def run_study(
        self, *, timeout: float | None = None, progress: bool = True, **spec: Any
    ) -> dict[str, Any]:
        """:meth:`create_study`, then :meth:`wait` for it: the finished study."""
        created = self.create_study(**spec)
        return self.wait(created["id"], timeout=timeout, progress=progress)

    def studies(
        self,
        *,
        status: str | None = None,
        kind: str | None = None,
        tag: str | None = None,
        archived: bool = False,
    ) -> list[dict]:
        """Studies, newest first, with their progress, tags and note (only those with ``tag``;
        archived ones too with ``archived``)."""
        return self._get(
            "/api/studies", status=status, kind=kind, tag=tag, archived=archived or None
        )["items"]

    def study(self, study_id: int) -> dict[str, Any]:
        """A study's summary: status, progress and cells (its trials: :meth:`trials`)."""
        return self._get(f"/api/studies/{int(study_id)}", trials="false")

    def pause(self, study_id: int) -> dict[str, Any]:
        return self._request("POST", f"/api/studies/{int(study_id)}/pause").json()

    def resume(self, study_id: int) -> dict[str, Any]:
        return self._request("POST", f"/api/studies/{int(study_id)}/resume").json()

    def cancel(self, study_id: int) -> dict[str, Any]:
        return self._request("POST", f"/api/studies/{int(study_id)}/cancel").json()

    # -- candidates -------------------------------------------------------------------------

    def submit_candidate(self, name: str, formula: str) -> dict[str, Any]:
        """Store f(u) = ``formula`` under ``name`` (a write token): its canonical form,
        properties and prescreen, or ``duplicate_of`` when it is a known function (then
        nothing is stored). A formula the parser refuses is a 422 ``ClientError``."""
        return self._request(
            "POST", "/api/candidates", json={"name": name, "formula": formula}
        ).json()

    def candidates(
        self,
        *,
        source: Literal["catalog", "user"] | None = None,
        group: str | None = None,
        q: str | None = None,
        archived: bool = False,
    ) -> list[dict[str, Any]]:
        """The catalog and stored candidates (only ``source``, ``group``, names containing
        ``q``; archived ones too with ``archived``)."""
        found = self._get(
            "/api/candidates", source=source, group=group, q=q, archived=archived or None
        )
        return list(found["items"])

    def candidate(self, name: str) -> dict[str, Any]:
        """One function: a catalog name, a stored candidate, a transform call or a formula
        (``"u/(1+abs(u))"``: any text, sent as one path segment), with its properties, f and
        f' for plotting, and its leaderboard rows across proxies (``results``)."""
        return self._get(f"/api/candidates/{_segment(name)}")

    # -- housekeeping ---------------------------------------------------------------------------
    # What ``normfree study tag|note|archive|delete`` and ``normfree candidates archive|delete``
    # do, over the API: a token (its owner's, or an admin one) and the server's own checks.
    # Deletes answer what they remove (``removes``: trials, curve points, diagnostics rows,
    # leaderboard arms folded again, the Optuna study); ``dry_run=True`` only lists it, so a
    # notebook can look before it removes, as the CLI prints before it asks.

    def delete_study(self, study_id: int, *, dry_run: bool = False) -> dict[str, Any]:
        """Delete a finished (complete, failed or cancelled) study with its trials, curves,
        diagnostics and Optuna study; its proxy's leaderboard drops it. ``dry_run``: only say
        what it would remove (``removes``; ``removes.blocked``: why it would be refused now).
        A running study is refused (409): :meth:`cancel` it first; or :meth:`archive_study`
        to hide it and keep every row."""
        return self._delete(f"/api/studies/{int(study_id)}", dry_run)

    def delete_arm(self, study_id: int, arm_key: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Delete one arm of a finished study (``arm_key``: one of a cell's ``arm_keys``, as
        :meth:`arms` lists them): its trials, curves and diagnostics; the leaderboard is folded
        again without them, and the study's Optuna history stays (its sampler saw them)."""
        return self._delete(f"/api/studies/{int(study_id)}/arms/{_segment(arm_key)}", dry_run)

    def delete_candidate(self, name: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Delete a stored candidate no study ran. One a study ran is refused (409, the studies
        in ``ClientError.detail["used_by_studies"]``): its formula is what their leaderboard
        arms show, so :meth:`archive_candidate` it or delete those studies first."""
        return self._delete(f"/api/candidates/{_segment(name)}", dry_run)

    def archive_study(self, study_id: int, *, restore: bool = False) -> dict[str, Any]:
        """Archive a finished study: it leaves lists and leaderboards (``archived=True`` on
        :meth:`studies` and :meth:`leaderboard` shows it), every row kept. ``restore`` undoes
        it. The answer says what now is archived."""
        return self._archive(f"/api/studies/{int(study_id)}", restore)

    def archive_arm(self, study_id: int, arm_key: str, *, restore: bool = False) -> dict[str, Any]:
        """Take one arm of a study off the leaderboards (one bad arm need not stay there for
        ever); the study still shows it, marked archived. ``restore`` puts it back."""
        path = f"/api/studies/{int(study_id)}/arms/{_segment(arm_key)}"
        return self._archive(path, restore)

    def archive_candidate(self, name: str, *, restore: bool = False) -> dict[str, Any]:
        """Hide a stored candidate from the candidate list; studies and leaderboards that ran
        it are unchanged. ``restore`` shows it again."""
        return self._archive(f"/api/candidates/{_segment(name)}", restore)

    def tag_study(
        self, study_id: int, *tags: str, remove: tuple[str, ...] | list[str] = ()
    ) -> list[str]:
        """Add ``tags`` to the study (and take off those in ``remove``); its tags now. Tags
        are 1-40 characters without spaces or commas, at most 20 a study; :meth:`studies`
        filters by one (``tag=``)."""
        body = {"add_tags": list(tags), "remove_tags": list(remove)}
        return list(self._patch_study(study_id, body)["tags"])

    def note_study(self, study_id: int, note: str) -> str | None:
        """Set the study's note (shown on its page and in lists; ``""`` clears it); the note
        now."""
        return self._patch_study(study_id, {"note": note})["note"]

    def _patch_study(self, study_id: int, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("PATCH", f"/api/studies/{int(study_id)}", json=body).json()

    def _delete(self, path: str, dry_run: bool) -> dict[str, Any]:
        params = {"dry_run": "true"} if dry_run else {}
        return self._request("DELETE", path, params=params).json()

    def _archive(self, path: str, restore: bool) -> dict[str, Any]:
        return self._request("POST", f"{path}/{'unarchive' if restore else 'archive'}").json()

    def wait(
        self,
        study_id: int,
        *,
        timeout: float | None = None,
        poll: float = 2.0,
        progress: bool | Callable[[dict[str, Any]], None] = True,
    ) -> dict[str, Any]:
        """Poll the study until it is complete, failed, cancelled or paused; its summary.

        Settled means its status, or the state its counts show (``progress.state``: a study
        with nothing left to run shows the outcome its driver writes next), is one of those.
        ``progress``: True draws a bar of finished trials (tqdm) with the server's ETA and the
        best arm so far, a callable is given each summary instead, False is silent. Polls are
        conditional (``If-None-Match``): an unchanged study costs the server a 304.
        ``TimeoutError`` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = None
        if progress is True:
            from tqdm.auto import tqdm

            bar = tqdm(total=0, unit="trial", desc=f"study {study_id}")
        summary = None
        try:
            for summary in self._polls(study_id, poll, deadline):
                p = summary["progress"]
                state = p.get("state") or summary["status"]
                if bar is not None:
                    bar.total = p["total"]
                    bar.n = p["finished"]
                    bar.set_postfix_str(_postfix(state, p), refresh=False)
                    bar.refresh()
                elif callable(progress):
                    progress(summary)
                if summary["status"] in SETTLED or state in SETTLED:
                    return summary
        finally:
            if bar is not None:
                bar.close()
        status = summary["status"] if summary else "unknown"
        raise TimeoutError(f"study {study_id} still {status} after {timeout} s")

    def _polls(self, study_id: int, poll: float, deadline: float | None) -> Iterator[dict]:
        """The study's summary at each poll until ``deadline`` (one last poll at it)."""
        path, etag, summary = f"/api/studies/{int(study_id)}", None, None
        while True:
            headers = {"If-None-Match": etag} if etag and summary is not None else {}
            r = self._request("GET", path, params={"trials": "false"}, headers=headers)
            if r.status_code != 304:
                summary, etag = r.json(), r.headers.get("etag")
            assert summary is not None
            yield summary
            if deadline is not None and time.monotonic() >= deadline:
                return
            left = poll if deadline is None else deadline - time.monotonic()
            time.sleep(max(0.0, min(poll, left)))

    # -- trials, arms, leaderboards -----------------------------------------------------------

    def trials(self, study_id: int, *, status: list[str] | None = None) -> list[dict[str, Any]]:
        """Every trial of the study (paged through, 1,000 at a time): id, candidate, seed,
        status, axis values, objective value."""
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self._get(
                f"/api/studies/{int(study_id)}/trials", limit=1000, cursor=cursor, status=status
            )
            out.extend(page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def trial(self, trial_id: int) -> dict[str, Any]:
        """One trial with its config, metrics, curves and per-layer diagnostics."""
        return self._get(f"/api/trials/{int(trial_id)}")

    def arms(self, study_id: int) -> list[dict[str, Any]]:
        """The study's arms (cells): mean and CI per function and value or options."""
        return self._get(f"/api/studies/{int(study_id)}/arms")["items"]

    def leaderboard(
        self,
        proxy: str,
        *,
        study_id: int | None = None,
        group: str | None = None,
        archived: bool = False,
    ) -> dict[str, Any]:
        """``proxy``'s leaderboard (only ``study_id``'s trials, only arms of ``group``;
        archived studies and arms counted too with ``archived``)."""
        return self._get(
            f"/api/leaderboards/{proxy}",
            study_id=study_id,
            group=group,
            archived=archived or None,
        )

    # -- tables -------------------------------------------------------------------------------

    def export(
        self,
        what: What,
        key: int | str,
        fmt: Literal["csv", "parquet"] = "csv",
        *,
        study_id: int | None = None,
        group: str | None = None,
        status: list[str] | None = None,
        trials: list[int] | None = None,
    ) -> bytes:
        """The server's export of ``what`` as file bytes: ``trials`` or ``arms`` of study
        ``key`` (only trials in ``status``), the ``curves`` of study ``key``'s trials (only
        the ids in ``trials``; long: a row per trial, epoch and metric), or the
        ``leaderboard`` of proxy ``key`` (only ``study_id``'s trials, only arms of ``group``)."""
        params: dict[str, Any]
        if what == "leaderboard":
            path, params = f"/api/leaderboards/{key}", {"study_id": study_id, "group": group}
        elif what in ("trials", "arms"):
            path, params = f"/api/studies/{int(key)}/{what}", {"status": status}
        elif what == "curves":
            ids = None if trials is None else ",".join(str(int(t)) for t in trials)
            path, params = f"/api/studies/{int(key)}/curves", {"trials": ids}
        else:
            raise ValueError(
                f"unknown table {what!r}; choose from trials, arms, curves, leaderboard"
            )
        clean = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params={**clean, "format": fmt}).content

    def to_dataframe(self, what: What, key: int | str, **kw: Any) -> pd.DataFrame:
        """:meth:`export` read into pandas: Parquet (typed) where pyarrow is installed here,
        else CSV (cells the export quoted against spreadsheets read back as written)."""
        import importlib.util

        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_dataframe needs pandas: pip install 'normfree[export]'") from None
        if importlib.util.find_spec("pyarrow") is not None:
            return pd.read_parquet(io.BytesIO(self.export(what, key, "parquet", **kw)))
        from normfree.csvsafe import uncell

        frame = pd.read_csv(io.BytesIO(self.export(what, key, "csv", **kw)))
        for col in frame.select_dtypes(include=["object", "string"]).columns:
            frame[col] = frame[col].map(lambda v: uncell(v) if isinstance(v, str) else v)
        return frame


__all__ = ["Client", "ClientError"]
