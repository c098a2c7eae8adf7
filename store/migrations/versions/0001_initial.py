"""Initial schema: nodes, GPUs, samples and hourly roll-ups, scores, decisions, failures, alerts, probes.

Revision ID: 0001
Revises:
Create Date: 2026-02-01

A fixed snapshot: the metric columns are written out, not read from the catalogue, so a
catalogue field added later shows up as a difference in tests/store/test_schema.py and gets
its own migration.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

REAL, DOUBLE = "real", "double"
METRICS: tuple[tuple[str, str], ...] = (
    ("gpu_temp_c", REAL),
    ("memory_temp_c", REAL),
    ("power_w", REAL),
    ("gpu_util_pct", REAL),
    ("mem_copy_util_pct", REAL),
    ("sm_clock_mhz", REAL),
    ("mem_clock_mhz", REAL),
    ("fb_used_mib", REAL),
    ("fb_free_mib", REAL),
    ("ecc_sbe_volatile", DOUBLE),
    ("ecc_dbe_volatile", DOUBLE),
    ("ecc_sbe_aggregate", DOUBLE),
    ("ecc_dbe_aggregate", DOUBLE),
    ("retired_pages_sbe", DOUBLE),
    ("retired_pages_dbe", DOUBLE),
    ("retired_pages_pending", REAL),
    ("remapped_rows_correctable", DOUBLE),
    ("remapped_rows_uncorrectable", DOUBLE),
    ("row_remap_pending", REAL),
    ("row_remap_failure", REAL),
    ("pcie_replay_count", DOUBLE),
    ("pcie_link_gen", REAL),
    ("pcie_link_gen_max", REAL),
    ("pcie_link_width", REAL),
    ("pcie_link_width_max", REAL),
    ("clocks_event_reasons", REAL),
    ("thermal_violation_us", DOUBLE),
    ("power_violation_us", DOUBLE),
    ("xid", REAL),
    ("slowdown_temp_c", REAL),
    ("shutdown_temp_c", REAL),
    ("power_limit_w", REAL),
    ("energy_mj", DOUBLE),
    ("enc_util_pct", REAL),
    ("dec_util_pct", REAL),
    ("fb_total_mib", REAL),
    ("prof_gr_engine_active", REAL),
    ("prof_sm_active", REAL),
    ("prof_pipe_tensor_active", REAL),
    ("prof_dram_active", REAL),
    ("pcie_tx_kbps", REAL),
    ("pcie_rx_kbps", REAL),
    ("nvlink_crc_flit_errors", DOUBLE),
    ("nvlink_crc_data_errors", DOUBLE),
    ("nvlink_replay_errors", DOUBLE),
    ("nvlink_recovery_errors", DOUBLE),
    ("recovery_action", REAL),
)


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _metrics() -> list[sa.Column]:
    return [sa.Column(name, sa.REAL() if t == REAL else sa.Double(), nullable=True) for name, t in METRICS]


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("hostname", sa.String(255), primary_key=True),
        _ts("first_seen"),
        _ts("last_seen"),
    )
    op.create_table(
        "gpus",
        sa.Column("uuid", sa.String(64), primary_key=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("model_name", sa.String(255), nullable=True),
        sa.Column("serial", sa.String(64), nullable=True),
        sa.Column("pci_bus_id", sa.String(32), nullable=True),
        _ts("first_seen"),
        _ts("last_seen"),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("latest_score_id", sa.Integer, nullable=True),
        sa.CheckConstraint("state IN ('active', 'lost', 'retired')", name="ck_gpus_state"),
    )
    op.create_index("ix_gpus_hostname", "gpus", ["hostname"])
    op.create_table(
        "samples",
        sa.Column("gpu_uuid", sa.String(64)),
        _ts("timestamp"),
        *_metrics(),
        sa.PrimaryKeyConstraint("gpu_uuid", "timestamp"),
    )
    op.create_index("ix_samples_timestamp", "samples", ["timestamp"])
    op.create_table(
        "samples_hourly",
        sa.Column("gpu_uuid", sa.String(64)),
        _ts("hour"),
        sa.Column("n", sa.Integer, nullable=False),
        _ts("last_at"),
        *_metrics(),
        sa.PrimaryKeyConstraint("gpu_uuid", "hour"),
    )
    op.create_index("ix_samples_hourly_hour", "samples_hourly", ["hour"])
    op.create_table(
        "risk_scores",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("gpu_uuid", sa.String(64), sa.ForeignKey("gpus.uuid"), nullable=False),
        _ts("scored_at"),
        sa.Column("risk", sa.Double, nullable=True),
        sa.Column("risk_ecc", sa.Double, nullable=True),
        sa.Column("risk_thermal", sa.Double, nullable=True),
        sa.Column("risk_pcie", sa.Double, nullable=True),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
    )
    op.create_index("ix_risk_scores_gpu_scored", "risk_scores", ["gpu_uuid", "scored_at"])
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("gpu_uuid", sa.String(64), sa.ForeignKey("gpus.uuid"), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("acknowledged_by", sa.String(255), nullable=True),
        _ts("acknowledged_at", nullable=True),
        _ts("closed_at", nullable=True),
        sa.CheckConstraint("state IN ('open', 'acknowledged', 'closed')", name="ck_decisions_state"),
    )
    op.create_index(
        "ux_decisions_gpu_active",
        "decisions",
        ["gpu_uuid"],
        unique=True,
        sqlite_where=sa.text("state != 'closed'"),
        postgresql_where=sa.text("state != 'closed'"),
    )
    op.create_index("ix_decisions_state_decision", "decisions", ["state", "decision"])
    op.create_table(
        "failures",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("gpu_uuid", sa.String(64), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=True),
        _ts("failed_at"),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("xid", sa.Integer, nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        _ts("recorded_at"),
        sa.Column("recorded_by", sa.String(255), nullable=True),
        sa.CheckConstraint("mode IN ('ecc', 'thermal', 'pcie', 'other')", name="ck_failures_mode"),
        sa.CheckConstraint("kind IN ('failure', 'rma')", name="ck_failures_kind"),
    )
    op.create_index("ix_failures_gpu_uuid", "failures", ["gpu_uuid"])
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        _ts("received_at"),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("alertname", sa.String(255), nullable=True),
        sa.Column("severity", sa.String(64), nullable=True),
        sa.Column("action", sa.String(64), nullable=True),
        sa.Column("gpu_uuid", sa.String(64), nullable=True),
        sa.Column("hostname", sa.String(255), nullable=True),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("annotations", sa.JSON, nullable=False),
        _ts("starts_at"),
        _ts("ends_at", nullable=True),
        sa.Column("generator_url", sa.Text, nullable=True),
        sa.Column("group_key", sa.Text, nullable=True),
        sa.Column("receiver", sa.String(255), nullable=True),
        sa.UniqueConstraint("fingerprint", "starts_at", name="uq_alerts_fingerprint_starts"),
    )
    op.create_index("ix_alerts_gpu_uuid", "alerts", ["gpu_uuid"])
    op.create_index("ix_alerts_received", "alerts", ["received_at"])
    op.create_table(
        "probe_results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("gpu_uuid", sa.String(64), nullable=False),
        _ts("ran_at"),
        sa.Column("test", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("value", sa.Double, nullable=True),
        sa.Column("unit", sa.String(32), nullable=True),
        sa.Column("expected", sa.Double, nullable=True),
        sa.Column("ratio", sa.Double, nullable=True),
        sa.Column("duration_s", sa.Double, nullable=True),
        sa.Column("details", sa.JSON, nullable=True),
        sa.CheckConstraint("status IN ('pass', 'fail', 'error', 'skipped')", name="ck_probe_results_status"),
    )
    op.create_index("ix_probe_results_gpu_ran", "probe_results", ["gpu_uuid", "ran_at"])


def downgrade() -> None:
    for table in ("probe_results", "alerts", "failures", "decisions", "risk_scores",
                  "samples_hourly", "samples", "gpus", "nodes"):  # fmt: skip
        op.drop_table(table)
