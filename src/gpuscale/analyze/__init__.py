"""Analysis: run records -> tables, metrics and fits, with the paper's numbers. Never imports torch."""
