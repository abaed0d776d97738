"""controller/cache."""
