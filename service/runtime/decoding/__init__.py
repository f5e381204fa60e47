"""Decoding a batch: the model as the batch sees it (ModelSpec), rows, steps, the searches (greedy, beam,
alternatives, sampling), controls and scoring."""
