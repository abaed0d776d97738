"""webhook/policy."""
