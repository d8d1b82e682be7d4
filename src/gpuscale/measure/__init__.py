"""Measuring on a device: the training stage, the probe, the sentinel, and what they share (loaders, variants,
checkpoints, energy, the environment, the timing lock). Runs on a bare GPU host: torch, never polars or altair."""
