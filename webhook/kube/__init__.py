"""webhook/kube."""
