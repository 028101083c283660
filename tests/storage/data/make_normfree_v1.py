"""Rebuild ``normfree_v1.db``: the schema at revision 0001 with a few rows in it.

The file is checked in so ``test_migrations.py`` upgrades a database written by the *old*
schema, as a user's file would be. Rerun only if 0001 itself changes (it must not):

    .venv/bin/python tests/storage/data/make_normfree_v1.py
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from normfree.storage import Database

HERE = Path(__file__).parent
TARGET = HERE / "normfree_v1.db"

CONFIG = {
    "proxy": "vit-digits",
    "norm": {"name": "erf", "formula": None, "shift": "none", "affine": True, "alpha0": 0.5},
    "seed": 0,
    "overrides": {},
    "dataset": None,
    "epochs": None,
    "lr": None,
    "weight_decay": None,
    "warmup_epochs": None,
}


def build(path: Path = TARGET) -> None:
    path.unlink(missing_ok=True)
    db = Database(f"sqlite:///{path}")
    db.migrate("0001")
    db.dispose()
    con = sqlite3.connect(path)
    now = "2026-11-01 12:00:00.000000"
    con.execute(
        "INSERT INTO candidates (id, name, formula, canonical, fingerprint, properties, lineage,"
        " \"group\", citation, submitter, created_at) VALUES (1, 'erf', 'erf(u)', 'erf(u)',"
        " 'fp-erf', ?, '{}', 'sigmoid', 'Derf', 'catalog', ?)",
        (json.dumps({"odd": True, "bounded": True}), now),
    )
    con.execute(
        "INSERT INTO studies (id, kind, name, proxy, spec, status, optuna_study_name, created_at,"
        " updated_at) VALUES (1, 'property', 'v1 study', 'vit-digits', ?, 'complete',"
        " 'normfree-study-1', ?, ?)",
        (json.dumps({"kind": "property", "proxy": "vit-digits", "functions": ["erf"]}), now, now),
    )
    con.execute(
        "INSERT INTO trials (id, study_id, trial_key, arm_key, context_key, proxy, candidate, norm,"
        " axis_values, seed, config, status, attempt, lease_owner, objective, direction,"
        " objective_value, metrics, train_time_s, total_time_s, worker, created_at, started_at,"
        " finished_at, updated_at) VALUES (1, 1, 'key-v1', 'arm-v1', 'ctx-v1', 'vit-digits',"
        " 'erf', ?, '{}', 0, ?, 'COMPLETE', 1, 'w1', 'val_acc', 'maximize', 0.91, ?, 30.0,"
        " 31.0, 'w1', ?, ?, ?, ?)",
        (
            json.dumps(CONFIG["norm"]),
            json.dumps(CONFIG),
            json.dumps({"val_acc": 0.91}),
            now,
            now,
            now,
            now,
        ),
    )
    con.execute(
        "INSERT INTO trial_metrics (trial_id, epoch, step, train_loss, val_loss, metrics, lr,"
        " wall_time) VALUES (1, 0, 100, 0.5, 0.4, '{\"val_acc\": 0.91}', 0.001, 30.0)"
    )
    con.commit()
    con.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    build()
    print(f"wrote {TARGET}")
