"""The contract every stage shares: the run record, typed settings, params.yaml, atomic files and their schemas.

Nothing here imports torch, polars or altair."""
