"""gpuscale: how much faster a GPU trains a neural network than a CPU, as the network grows, and why."""

# The one place the version is written: pyproject.toml reads it (dynamic), `gpuscale --version` prints it.
__version__ = "0.1.0"
