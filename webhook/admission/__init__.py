"""trainguard's admission webhook server (``trainguard webhook``).

Paths (HTTPS, POST, ``Content-Type: application/json``, AdmissionReview ``admission.k8s.io/v1``; stable):

==========================================================================  =========  ==========================
path                                                                        type       webhook name (in messages)
==========================================================================  =========  ==========================
/mutate-trainer-kubeflow-org-v1alpha1-trainjob                              mutating   defaulter.trainjob.trainer.kubeflow.org
/validate-trainer-kubeflow-org-v1alpha1-trainjob                            validating validator.trainjob.trainer.kubeflow.org
/validate-trainer-kubeflow-org-v1alpha1-trainingruntime                     validating validator.trainingruntime.trainer.kubeflow.org
/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime              validating validator.clustertrainingruntime.trainer.kubeflow.org
/validate-trainguard-io-v1alpha1-trainjobpolicy                             validating validator.trainjobpolicy.trainguard.io
/validate-trainguard-io-v1alpha1-datasetcache                               validating validator.datasetcache.trainguard.io
==========================================================================  =========  ==========================

Ports: ``--port`` 9443 (HTTPS, TLS 1.2+, HTTP/1.1 only) and ``--health-port`` 8081 (plain HTTP): ``/healthz``
(process up), ``/readyz`` (200 only when a serving certificate is loaded AND every informer cache has listed;
503 with a JSON body saying which is missing), ``/metrics`` (Prometheus; names in ``metrics``).

Answers: allowed (+ ``patchType: JSONPatch`` with a minimal RFC 6902 patch from the original object, + warnings);
denied (``status.code`` 403, reason Forbidden, the policy's message; the apiserver shows
``admission webhook "<name>" denied the request: <message>``); AdmissionReview error (allowed=false, code 400 for
a review of the wrong kind for the path / without object, 500 when a policy raised -- or, with
``--on-policy-error allow``, admitted with a warning). HTTP errors before any review: 400 (not a v1
AdmissionReview), 404 (unknown path), 405 (not POST), 408 (body not received within ``--read-timeout``, 10 s),
413 (body over ``--max-body-bytes``, 8 MiB: two 1.5 MiB etcd objects plus envelope fit easily), 415 (content
type). Connections idle (or with unfinished headers) for ``--idle-timeout`` (120 s, above Go's 90 s client idle
timeout) are closed. Never a 5xx.

Certificates: by default a self-signed CA + serving certificate for ``<service>.<ns>.svc`` (and ``--cert-dns-name``
/ ``--cert-ip``) kept in Secret ``--cert-secret`` (``trainguard-webhook-cert``), renewed ``--cert-renew-before``
(90d) before expiry (CA ``--ca-lifetime`` 3650d, leaf ``--cert-lifetime`` 365d), CA injected into
``--mutating-configuration``/``--validating-configuration``, swapped into the live TLS context without restart.
Replicas share the Secret (optimistic concurrency). ``--cert-dir DIR``: externally provided tls.crt/tls.key
(cert-manager), only watched.

Registration objects: ``registration.webhook_configurations`` / ``python -m trainguard.webhook.admission.registration``.
Modules: ``review`` (AdmissionReview codec), ``routes`` (path -> policy function), ``json_patch`` (the minimal
patch), ``server`` (aiohttp apps), ``connections`` (connection cap, handshake and header deadlines), ``budget`` (the
body budget), ``process`` (open-files sizing, returned memory), ``ratelimit`` (rate-limited error logs),
``metrics``, ``tls`` (SSL context, reload, cert-dir watcher), ``certs`` (generation, rotation plan), ``rotator``
(Secret + caBundle I/O), ``registration``, ``main`` (the command); logs are ``trainguard.process``'s JSON lines.
Integration fixtures for other areas: ``tests/integration/conftest.py``.
"""
