"""OAP registry (see the registry issue); empty until it lands."""
