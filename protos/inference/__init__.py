"""Generated modules of the KServe v2 / Triton `inference` protos, registered in a private pool.

tritonclient compiles its own copy of the same `inference.*` messages into protobuf's default
descriptor pool, and one pool cannot hold a symbol twice. Our generated modules therefore add
their files to POOL instead (protos/generate.py rewrites that one line of the generated code), so
the server and tritonclient can live in one process (tests, benchmarks). The wire format does not
depend on the pool. Server reflection must be given a pool that also holds these files.
"""

from __future__ import annotations

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
