"""oap-monitor: watches C2SP logs and an OAP registry over time and delivers alerts (docs/architecture.md §8)."""
