# Fabric notebook: diffcdc, a lakehouse table into a mirrored database's landing zone.
#
# Each run takes the lakehouse table erp_orders as one full snapshot, diffs it against the last
# one and uploads only the changes to the Open Mirroring landing zone of a mirrored database,
# which replicates them into its tables. Schedule the notebook to run it nightly.
#
# * Fabric Runtime 2.0 (Spark 4.x), with a default lakehouse attached: the state lives in its
#   files, /lakehouse/default/Files/diffcdc/state (never delete or edit it by hand).
# * Fabric imports notebooks as .ipynb or .py files. The "# %%" lines mark the cells (the percent
#   format of VS Code and Jupytext: `jupytext --to ipynb fabric_notebook.py` makes an .ipynb).
# * See docs/platforms.md and, for the landing zone's credentials, docs/remote-landing.md.

# %%
# Install the wheel (uploaded to the lakehouse's Files/wheels) for this session, in a cell of its
# own, first (remove the leading "# "):
#
# %pip install /lakehouse/default/Files/wheels/diffcdc-0.1.0-py3-none-any.whl
#
# Scheduled and pipeline runs: add the wheel to an Environment attached to the notebook instead
# (inline %pip is off in pipeline runs by default).

# %%
from azure.identity import ClientSecretCredential

import diffcdc
from diffcdc.errors import DiffcdcError

# The mirrored database's landing zone, as its settings show it (workspace and item by name or ID).
LANDING = "https://onelake.dfs.fabric.microsoft.com/Sales/ERP.MountedRelationalDatabase/Files/LandingZone"
STATE = "/lakehouse/default/Files/diffcdc/state"

# OneLake takes Microsoft Entra tokens only. Here a service principal with write access to the
# mirrored database (e.g. a Contributor of its workspace), its secret from Azure Key Vault: never
# in the notebook. Alternative: leave "credential" out and set AZURE_TENANT_ID, AZURE_CLIENT_ID
# and AZURE_CLIENT_SECRET in the environment (DefaultAzureCredential, docs/remote-landing.md).
credential = ClientSecretCredential(
    tenant_id="00000000-0000-0000-0000-000000000000",
    client_id="11111111-1111-1111-1111-111111111111",
    client_secret=notebookutils.credentials.getSecret(
        "https://erp-vault.vault.azure.net/", "diffcdc-client-secret"
    ),
)

SINKS = [
    {
        "type": "open_mirroring",
        "landing": LANDING,
        "landing_options": {
            "credential": credential,  # a secret: never logged, never in reports
            "max_workers": 8,          # files uploaded in parallel (renames stay in order)
        },
    }
]

# The snapshot: the whole table, as it is now.
orders = spark.read.table("erp_orders")

# %%
try:
    report = diffcdc.run_dataframe(
        orders,
        table="Orders",          # the landing zone's table folder: <LandingZone>/Orders/
        keys=["OrderID"],
        sinks=SINKS,
        state=STATE,
        # snapshot_id: default now, in UTC. A rerun with an id already committed does nothing,
        # an older id is refused.
    )
except DiffcdcError as err:
    # One line: the table, the snapshot, what went wrong and what to do. Exit codes: 2 a
    # configuration error, 3 the snapshot was refused (bad keys, quality gate), 1 anything else
    # (an upload that failed after its retries: run again, it resumes where it stopped).
    print(f"diffcdc failed (exit code {err.exit_code}): {err}")
    raise  # fails the cell, and so the scheduled run

# %%
print(f"outcome: {report.outcome}")  # ok | nothing to do
if report.snapshots:
    snap = report.snapshots[0]
    print(f"snapshot {snap.snapshot_id} -> version {snap.version}: "
          f"+{snap.inserted} ~{snap.updated} -{snap.deleted} ({snap.rows} rows), "
          f"{len(snap.files)} landing file(s)")
