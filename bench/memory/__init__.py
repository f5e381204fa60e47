"""Memory probes: what a process holds for a bundle's weights (`python -m bench.memory.weights`)."""
