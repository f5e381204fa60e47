"""The HTTP/REST server beside gRPC, in the same process and event loop (aiohttp): KServe v2 REST with
Triton's binary tensor data, /config, /stats and repository extensions (kserve_rest.py), Triton's generate
extension with server-sent events (generate.py) and Score's JSON endpoint (score.py). Handlers only
convert wire formats to the data plane's calls (service/dataplane/calls.py) and back; errors and metrics
go through errors.py; app.py starts and stops the server.
"""
