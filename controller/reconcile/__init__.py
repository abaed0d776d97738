"""controller/reconcile."""
