"""OAP mirror: a C2SP tlog-mirror for any C2SP log, and the follower that feeds it (docs/architecture.md §4.1).

wire.py      the add-entries body and mirror-info answers (pure)
tickets.py   authenticated tickets naming past pending checkpoints
store.py     what a mirror keeps and the contract of its storage
embedded.py  the store: SQLite (WAL) entries and checkpoints, hash files for the tree
core.py      add-checkpoint and add-entries, to the letter of the spec (no aiohttp)
service.py   the mirror service: key, tickets, store, core, bucket publisher, metrics
api.py       the HTTP API and the monitoring prefix (tlog-tiles)
follower.py  `oap-mirror follow`: any tlog-tiles log into a mirror
cli.py       `oap-mirror`
"""
