"""The README's first set-up command ends in ``diffcdc demo``: three nights of two tables,
then every table's landing files replayed and compared with the last snapshot."""

from __future__ import annotations

import json

from diffcdc.cli.main import main


def test_the_demo_runs_three_nights_and_its_landing_zone_replays(spark, tmp_path, capsys):
    args = ["demo", "--dir", str(tmp_path / "demo"), "--state", str(tmp_path / "state"), "--json"]
    for _ in range(2):  # repeatable: it starts over with its own tables
        assert main(args) == 0
        doc = json.loads(capsys.readouterr().out)
        nights = doc["nights"]
        assert len(nights) == 3 and all(r["error"] is None for night in nights for r in night)
        changes = [
            sum(s[k] for r in night for s in r["snapshots"] for k in ("updated", "deleted"))
            for night in nights
        ]
        assert changes[0] == 0 and changes[1] > 0 and changes[2] > 0, changes
        assert len(doc["verify"]) == 2 and all(v["identical"] for v in doc["verify"].values())
