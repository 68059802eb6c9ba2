"""OAP witness: C2SP tlog-witness cosigner, feeder, conformance peer-witnessing (docs/architecture.md §4)."""
