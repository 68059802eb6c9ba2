"""OAP transparency log: C2SP signed notes, checkpoints, tiles, proofs, appender, server, client."""
