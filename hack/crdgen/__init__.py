"""CRD generation (driven by ``hack/gen_crds.py``).

* ``upstream``    the trainer.kubeflow.org CRDs: upstream Kubeflow Trainer's, from the pinned Go module, plus the
                  listed ``ADDITIONS``
* ``structural``  Kubernetes OpenAPI v3 definitions -> structural CRD schemas (refs resolved, CRD-safe keys)
* ``walker``      pydantic model classes -> CRD schemas (descriptions, defaults, limits, CEL from field metadata),
                  for the trainguard.io CRDs
* ``render``      CustomResourceDefinition documents and deterministic YAML
"""
