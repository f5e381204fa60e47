"""The protocol-neutral call layer: every call of every protocol, as plain data (docs/architecture.md)."""
