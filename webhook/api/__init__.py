"""webhook/api."""
