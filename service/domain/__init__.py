"""The vocabulary every layer speaks: errors, options, requests, results, limits. No I/O, no gRPC."""
