"""trainguard's companion reconciler (``trainguard.controller.reconcile``) and node-local dataset cache (``trainguard.cache``).

May import ``webhook``; ``webhook`` never imports this package.
"""
