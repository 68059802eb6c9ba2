"""OAP witness (see the witness issue); empty until it lands."""
