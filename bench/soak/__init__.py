"""Reliability under load: the soak with faults (`python -m bench.soak`: its request mix, how each request
is sent and checked, the faulty server, the report) and the fuzz command (`python -m bench.soak.fuzz`)."""
