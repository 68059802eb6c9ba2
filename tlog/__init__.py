"""OAP transparency log: C2SP signed notes, checkpoints, tiles, proofs, sequencer, server, client."""
