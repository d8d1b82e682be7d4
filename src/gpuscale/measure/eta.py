"""The study's ETA in training's progress lines (standard library only: training imports it).

The workflow's up-front estimate (gpuscale.predict.estimate) writes {"jobs": {record: predicted seconds}} and names the
file in GPUSCALE_STUDY_PLAN; a training job adds the predicted seconds of the jobs whose records do not exist yet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PLAN_ENV = "GPUSCALE_STUDY_PLAN"


def study_eta_seconds(job_eta: float, own_record: Path | str) -> float | None:
    """This job's ETA plus the predicted seconds of the plan's other jobs whose records do not exist yet;
    None without a plan (a job run by hand, or on a cluster that does not pass the variable on)."""
    path = os.environ.get(PLAN_ENV)
    if not path:
        return None
    try:
        jobs = json.loads(Path(path).read_text())["jobs"]
    except (OSError, ValueError, KeyError):
        return None
    root, own = Path(path).resolve().parent.parent, Path(own_record).resolve()
    rest = sum(s for record, s in jobs.items() if (root / record).resolve() != own and not (root / record).exists())
    return job_eta + rest
