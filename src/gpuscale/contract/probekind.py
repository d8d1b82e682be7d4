"""What a probe record measured, as far as comparing it with another depends on it (torch-free).

A lease's ratios transfer only between probes made the same way (gpuscale.predict.transfer.compatible); these are
the values today's probe writes, so that a check can tell the leases probed as the tool probes now from those
probed before a fix (docs/prediction.md).
"""

from __future__ import annotations

# The layer table's timed step (probe records: layer_table.harness; absent: 1, the summed-output harness of before
# 2026-12-05). gpuscale.measure.layertable times with it.
LAYER_TABLE_HARNESS = 2
# input_pipeline[.with_step].source of a pipeline timed on the prepared dataset training reads, and of one timed on
# synthetic images (a probe without --data; every probe before 2026-12-04).
PREPARED_DATA = "prepared data"
SYNTHETIC = "synthetic"
