"""Native translation API protos (package translator)."""
