"""OAP witness: C2SP tlog-witness cosigner, feeder, conformance peer-witnessing (DESIGN §4)."""
