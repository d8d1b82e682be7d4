"""Devices never measured: a catalog of GPUs and CPUs with datasheet figures (catalog), and the transfer of a
measured device's epoch to one of them (transfer). A torch-free leaf: it imports nothing else of gpuscale."""
