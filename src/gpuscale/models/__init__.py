"""The model registry (torch-free names and builders), the networks, and their facts file (modelfacts.json)."""
