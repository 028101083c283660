"""Initial schema: candidates, studies, trials, per-epoch metrics, per-layer diagnostics.

Only primary keys, unique keys and foreign keys here; the query indexes and the API token table
came in 0002.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from normfree.storage.migrations.columns import JSON, TS

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("formula", sa.Text(), nullable=True),
        sa.Column("canonical", sa.Text(), nullable=True),
        sa.Column("fingerprint", sa.String(64), nullable=True),
        sa.Column("properties", JSON, nullable=False),
        sa.Column("lineage", JSON, nullable=False),
        sa.Column("group", sa.String(100), nullable=True),
        sa.Column("citation", sa.Text(), nullable=True),
        sa.Column("submitter", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_candidates"),
        sa.UniqueConstraint("name", name="uq_candidates_name"),
    )
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("proxy", sa.String(100), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("optuna_study_name", sa.String(200), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_studies"),
        sa.UniqueConstraint("optuna_study_name", name="uq_studies_optuna_study_name"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("trial_key", sa.String(64), nullable=False),
        sa.Column("arm_key", sa.String(64), nullable=False),
        sa.Column("context_key", sa.String(64), nullable=False),
        sa.Column("proxy", sa.String(100), nullable=False),
        sa.Column("candidate", sa.String(200), nullable=False),
        sa.Column("norm", JSON, nullable=False),
        sa.Column("axis_values", JSON, nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("optuna_number", sa.Integer(), nullable=True),
        sa.Column("objective", sa.String(100), nullable=True),
        sa.Column("direction", sa.String(10), nullable=True),
        sa.Column("objective_value", sa.Float(), nullable=True),
        sa.Column("metrics", JSON, nullable=False),
        sa.Column("eval_train_loss", sa.Float(), nullable=True),
        sa.Column("diverged_at_step", sa.Integer(), nullable=True),
        sa.Column("train_time_s", sa.Float(), nullable=True),
        sa.Column("total_time_s", sa.Float(), nullable=True),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["study_id"], ["studies.id"], name="fk_trials_study_id_studies", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.UniqueConstraint("study_id", "trial_key", name="uq_trials_study_id_trial_key"),
    )
    op.create_table(
        "trial_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("train_loss", sa.Float(), nullable=False),
        sa.Column("val_loss", sa.Float(), nullable=True),
        sa.Column("metrics", JSON, nullable=False),
        sa.Column("lr", sa.Float(), nullable=False),
        sa.Column("wall_time", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_id"], ["trials.id"], name="fk_trial_metrics_trial_id_trials", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_trial_metrics"),
        sa.UniqueConstraint("trial_id", "epoch", name="uq_trial_metrics_trial_id_epoch"),
    )
    op.create_table(
        "trial_diagnostics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("layer", sa.String(200), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=True),
        sa.Column("s_mean", sa.Float(), nullable=True),
        sa.Column("gamma_mean", sa.Float(), nullable=True),
        sa.Column("gamma_std", sa.Float(), nullable=True),
        sa.Column("beta_mean", sa.Float(), nullable=True),
        sa.Column("beta_std", sa.Float(), nullable=True),
        sa.Column("input_std", sa.Float(), nullable=True),
        sa.Column("input_absmax", sa.Float(), nullable=True),
        sa.Column("branch_norm", sa.Float(), nullable=True),
        sa.Column("grad_norm", sa.Float(), nullable=True),
        sa.Column("extra", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["trials.id"],
            name="fk_trial_diagnostics_trial_id_trials",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_trial_diagnostics"),
        sa.UniqueConstraint(
            "trial_id", "epoch", "layer", name="uq_trial_diagnostics_trial_id_epoch_layer"
        ),
    )


def downgrade() -> None:
    for table in ("trial_diagnostics", "trial_metrics", "trials", "studies", "candidates"):
        op.drop_table(table)
