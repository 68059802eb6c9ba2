"""The HTTP layer every service shares: the aiohttp application and its middlewares, limits,
request bodies, answers and errors, the fast path, sending and the serve loop."""
