"""The reconcile path (``trainguard controller``): TrainJobs become JobSets, DatasetCaches become agent DaemonSets.

* ``main``          the command: flags, the process shell, then ``controller``
* ``controller``    wiring: watch caches -> work queue (``queue``) -> N workers -> reconcilers, only on the replica
                    holding the Lease (``leader``)
* ``trainjob``      the TrainJob reconciler: runtime snapshot, ``enforcement`` (Enforce policies; state Blocked), the
                    build's objects server-side applied dependants first, ``status`` (upstream's conditions plus the
                    ``trainguard.io/state`` label), ``events`` (core/v1, listed by the kubeflow SDK), ``gates``
                    (trainer pods held until their DatasetCache is warm), ``multikueue`` (the manager's phase of a job
                    MultiKueue runs on a worker)
* ``datasetcache``  the DatasetCache reconciler; ``cache_daemonset`` builds its agents' objects and status,
                    ``cache_agent_policy`` the ValidatingAdmissionPolicy that confines the agents' identity
* ``metrics``       Prometheus metrics and the health endpoints

Flags, metrics and the loop in detail: ``controller/reconcile/README.md``. Imports ``trainguard.webhook`` (runtime,
policy, kube); never the other way round.
"""
