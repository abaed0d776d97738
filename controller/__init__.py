"""trainguard's companion reconciler (``controller.reconcile``) and node-local dataset cache (``controller.cache``).

May import ``webhook``; ``webhook`` never imports this package.
"""
