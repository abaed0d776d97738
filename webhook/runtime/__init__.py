"""webhook/runtime."""
