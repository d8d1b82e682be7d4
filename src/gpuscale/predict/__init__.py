"""Prediction before paying: the cost model, the predict stage and the workflow's up-front estimate."""
