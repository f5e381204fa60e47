"""Score beside translation on a real server: its memory, and the latency of translations beside it."""
