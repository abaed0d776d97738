"""trainguard's policy service: API models, the runtime framework, the policy engine and the admission server.

Packages:

* ``api``        typed models of every object trainguard reads or writes, read-only views over wire dicts
                 (``views``), constants, apimachinery helpers (metav1 times, owner references)
* ``runtime``    the runtime framework: TrainJob + runtime -> effective job -> the objects the reconciler applies;
                 one plugin registry for the ML and pod-group policies
* ``policy``     admission decisions: the engine's entry points, ``(AdmissionInput, ClusterSnapshot) -> Verdict``,
                 and the reconciler's Enforce check
* ``admission``  the admission server (``trainguard webhook``): HTTPS, AdmissionReview codec, connection limits,
                 certificates, webhook registration
* ``kube``       the asyncio Kubernetes client, watch-backed caches and the cluster snapshot, shared with the reconciler
* ``process``    installed as ``trainguard.process``: JSON logs, probe server, signal-to-stop for the three commands

Modules: ``field`` (field errors in the apiserver's format), ``cli`` (the ``trainguard`` command; subcommands are
entry points), ``render`` (``trainguard render``: files, clock, output) around ``offline`` (its engine: admission and
the build on parsed manifests), ``dataset_cache_flags`` (the admin's DatasetCache source flags of the webhook, the
controller and render).

Everything except ``admission``, ``kube``, ``process`` and the command shells ``cli`` and ``render`` is pure: no
network, files, processes or threads, clock, logging or output (``tests/unit/test_layout.py``), so the webhook, the
reconciler (``trainguard.controller``) and ``trainguard render`` share one implementation. Nothing here imports
``trainguard.controller`` or ``trainguard.cache``.
"""

__version__ = "0.1.0"
