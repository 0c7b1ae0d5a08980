# Databricks notebook source
# MAGIC %md
# MAGIC # diffcdc: a Unity Catalog table into a Delta table with a change data feed
# MAGIC
# MAGIC Each run takes `main.erp.orders` as one full snapshot, diffs it against the last one and
# MAGIC publishes only the changes: one Delta commit per run with changes, whose change data feed
# MAGIC is the diff, and every change row kept in a changelog table. Schedule it as a job task.
# MAGIC
# MAGIC * Compute: serverless (environment version 4 or newer), a standard access mode cluster on
# MAGIC   17.3 LTS or newer, or a dedicated access mode cluster on 14.3 LTS or newer.
# MAGIC * On serverless, add the wheel to the notebook's environment (Environment side panel →
# MAGIC   Dependencies) instead of the `%pip` cell: diffcdc's small tasks run on the executors and
# MAGIC   must import it there.
# MAGIC * State lives in the volume `/Volumes/main/cdc/state`; never delete or edit it by hand.
# MAGIC
# MAGIC See docs/platforms.md.

# COMMAND ----------

# MAGIC %pip install /Volumes/main/cdc/wheels/diffcdc-0.1.0-py3-none-any.whl

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

import diffcdc
from diffcdc.errors import DiffcdcError

STATE = "/Volumes/main/cdc/state"
SINKS = [
    {
        "type": "delta",
        # delta-rs writes these from this notebook's Python. It commits with a rename that must
        # not overwrite; if a volume refuses it ("Function not implemented (os error 38)"), give
        # the abfss:// location of the storage behind it, with "storage_options" (docs/delta.md).
        "path": "/Volumes/main/cdc/lake/orders",
        "changelog_path": "/Volumes/main/cdc/lake/orders_changelog",
    }
]

# The snapshot: the whole table, as it is now.
orders = spark.table("main.erp.orders")

# Or straight from the database, with your own JDBC read (the driver must be on the cluster;
# the password from a secret scope, never in the notebook):
# orders = (
#     spark.read.format("jdbc")
#     .option("url", "jdbc:postgresql://erp-db.example.com:5432/erp")
#     .option("dbtable", "public.orders")
#     .option("user", "reader")
#     .option("password", dbutils.secrets.get("erp", "reader-password"))
#     .load()
# )

# COMMAND ----------

try:
    report = diffcdc.run_dataframe(
        orders,
        table="Orders",
        keys=["OrderID"],
        sinks=SINKS,
        state=STATE,
        # snapshot_id: default now, in UTC. A job may pass its own (its run date): a rerun
        # with an id already committed does nothing, an older id is refused.
    )
except DiffcdcError as err:
    # One line: the table, the snapshot, what went wrong and what to do. Exit codes: 2 a
    # configuration error, 3 the snapshot was refused (bad keys, quality gate), 1 anything else.
    # State and every sink are as they were before the run.
    print(f"diffcdc failed (exit code {err.exit_code}): {err}")
    raise  # fails the cell, and so the job task

# COMMAND ----------

print(f"outcome: {report.outcome}")  # ok | nothing to do
if report.snapshots:
    snap = report.snapshots[0]
    print(f"snapshot {snap.snapshot_id} -> version {snap.version}: "
          f"+{snap.inserted} ~{snap.updated} -{snap.deleted} ({snap.rows} rows)")
