"""The model repository: which models exist (layout), and their lifecycle in this process (repository)."""
