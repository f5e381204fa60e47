"""The HTTP/REST server beside gRPC, in the same process and event loop (aiohttp): KServe v2 REST
with Triton's binary tensor data, /config, /stats and repository extensions (kserve_rest.py), and
Triton's generate extension with server-sent events (generate.py). Handlers only convert wire
formats: the work is the KServe v2 servicer's (service/api/kserve.py), on the same model
repository, schedulers and limits; errors and metrics go through errors.py; app.py starts and stops
the server.
"""
