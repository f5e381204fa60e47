"""The engine core: job queue, admission policies, the inference worker loop, the asyncio facade."""
