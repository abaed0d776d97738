"""trainguard's policy service: API models, the runtime framework, the policy engine and the admission server.

Everything here except ``trainguard.webhook.admission`` and ``trainguard.webhook.kube`` is pure (no network, no clock, no globals),
so the webhook, the reconciler (``controller``) and the offline ``trainguard render`` share one implementation.
"""

__version__ = "0.1.0"
