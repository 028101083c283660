"""``normfree.Client``'s housekeeping against a live server (real uvicorn on a loopback port, real
HTTP, real SQLite): what ``normfree study tag|note|archive|delete`` and ``normfree candidates
archive|delete`` do, from a notebook. Deletes list first (``dry_run``) and remove nothing then;
refusals arrive as ``ClientError`` with the server's status and words."""

from __future__ import annotations

import pytest

from normfree import Client
from normfree.api import create_app
from normfree.api.services import create_token
from normfree.client import ClientError
from normfree.testing.live import app_server
from tests.api.conftest import Api
from tests.api.test_housekeeping import _finished_study


def _board(nf: Client) -> set[str]:
    """The functions on the proxy's board, through the client (``shift_h(erf, 0)`` as erf)."""
    rows = nf.leaderboard("vit-tiny")["rows"]
    return {r["function"].removeprefix("shift_h(").split(",")[0] for r in rows}


def test_housekeeping_from_a_notebook(api: Api) -> None:
    sid = _finished_study(api, api.auth)
    # The boards' fidelity line is not what this checks: shown as last computed, not waited
    # for (tests wait up to 120 s for it, and a line is recomputed at most every 9 times its
    # cost: a minute or more after each change on a busy 2-core host).
    settings = api.settings.model_copy(
        update={"fidelity_line_wait_s": 0.0, "fidelity_line_rewait_s": 0.0}
    )
    app = create_app(settings, run_studies=False)
    with app_server(app) as url, Client(url, token=api.token) as nf:
        # tags and a note
        assert nf.tag_study(sid, "paper", "v1") == ["paper", "v1"]
        assert nf.tag_study(sid, remove=["v1"]) == ["paper"]
        assert [s["id"] for s in nf.studies(tag="paper")] == [sid]
        assert nf.studies(tag="v1") == []
        assert nf.note_study(sid, "seeds 0-1 only") == "seeds 0-1 only"
        assert nf.study(sid)["note"] == "seeds 0-1 only"
        assert nf.note_study(sid, "") is None
        with pytest.raises(ClientError) as err:
            nf.tag_study(sid, "two words")
        assert err.value.status == 422

        # one arm off the leaderboard, then back
        cells = nf.arms(sid)
        erf = next(c for c in cells if c["function"] == "erf")
        key = erf["arm_keys"][0]
        state = nf.archive_arm(sid, key)
        assert state["archived"] is True and state["trials"] == erf["n_total"]
        assert _board(nf) == {"tanh"}
        shown = nf.leaderboard("vit-tiny", archived=True)["rows"]
        assert any("erf" in r["function"] for r in shown)
        assert nf.archive_arm(sid, key, restore=True)["archived"] is False
        assert _board(nf) == {"erf", "tanh"}

        # the whole study: out of lists, then back
        assert nf.archive_study(sid)["archived"] is True
        assert sid not in [s["id"] for s in nf.studies()]
        assert sid in [s["id"] for s in nf.studies(archived=True)]
        nf.archive_study(sid, restore=True)
        assert sid in [s["id"] for s in nf.studies()]

        # an arm deleted: listed first, nothing removed by the preview
        n_trials = len(nf.trials(sid))
        preview = nf.delete_arm(sid, key, dry_run=True)
        assert preview["dry_run"] is True and preview["deleted"] is False
        assert preview["removes"]["trials"] == erf["n_total"] and len(nf.trials(sid)) == n_trials
        gone = nf.delete_arm(sid, key)
        assert gone["deleted"] is True and gone["removes"] == preview["removes"]
        assert len(nf.trials(sid)) == n_trials - erf["n_total"]

        # another token may not delete it; a preview of the owner's removes nothing
        bob = Client(url, token=create_token(api.repo, "bob"))
        with pytest.raises(ClientError) as err:
            bob.delete_study(sid, dry_run=True)
        assert err.value.status == 403
        preview = nf.delete_study(sid, dry_run=True)
        assert preview["removes"]["trials"] == n_trials - erf["n_total"]
        assert preview["removes"]["optuna_study"] == f"normfree-study-{sid}"
        assert nf.study(sid)["id"] == sid
        assert nf.delete_study(sid)["deleted"] is True
        with pytest.raises(ClientError) as err:
            nf.study(sid)
        assert err.value.status == 404

        # a stored candidate: archived out of the list, restored, deleted
        made = nf.submit_candidate("softsignish", "u/(1+2*abs(u))")
        assert made["created"] is True
        mine = [c["name"] for c in nf.candidates(source="user")]
        assert "softsignish" in mine
        assert nf.archive_candidate("softsignish")["archived"] is True
        assert "softsignish" not in [c["name"] for c in nf.candidates(source="user")]
        assert "softsignish" in [c["name"] for c in nf.candidates(source="user", archived=True)]
        nf.archive_candidate("softsignish", restore=True)
        check = nf.delete_candidate("softsignish", dry_run=True)
        assert check["deleted"] is False and check["removes"]["blocked"] is None
        assert nf.delete_candidate("softsignish")["deleted"] is True
        with pytest.raises(ClientError) as err:
            nf.delete_candidate("softsignish")
        assert err.value.status == 404
        bob.close()


def test_a_candidate_a_study_ran_is_refused_with_its_studies(api: Api) -> None:
    """The 409's detail names the studies, so a notebook can decide what to delete."""
    nf = Client(token=api.token, http=api.client)
    nf.submit_candidate("softsignish", "u/(1+2*abs(u))")
    body = {
        "kind": "options", "proxy": "vit-tiny", "functions": ["softsignish"], "seeds": 1,
        "options": {"depth": [2]}, "epochs": 1,
    }  # fmt: skip
    sid = _finished_study(api, api.auth, body)
    assert nf.delete_candidate("softsignish", dry_run=True)["removes"]["used_by_studies"] == [sid]
    with pytest.raises(ClientError) as err:
        nf.delete_candidate("softsignish")
    assert err.value.status == 409 and err.value.detail["used_by_studies"] == [sid]
    with pytest.raises(ClientError) as err:
        Client(http=api.client).archive_study(sid)  # no token
    assert err.value.status == 401
