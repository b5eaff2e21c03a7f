"""The store: what the package keeps in Redis and how it gets there.

``store.scripts`` loads the Lua of every transition (``store/lua/<name>.lua``, shared code in ``store/lua/lib/``)
and runs it (EVALSHA, NOSCRIPT reload where the call goes, Cluster pinning of the load).
"""
