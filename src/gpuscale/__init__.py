"""gpuscale: how much faster a GPU trains a neural network than a CPU, as the network grows, and why."""

__version__ = "0.1.0"
