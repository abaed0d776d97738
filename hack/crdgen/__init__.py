"""CRD generation from the ``webhook.api`` models (driven by ``hack/gen_crds.py``).

* ``structural``  Kubernetes OpenAPI v3 definitions -> structural CRD schemas (refs resolved, CRD-safe keys)
* ``walker``      pydantic model classes -> CRD schemas (descriptions, defaults, limits, CEL from field metadata)
* ``render``      CustomResourceDefinition documents and deterministic YAML
"""
