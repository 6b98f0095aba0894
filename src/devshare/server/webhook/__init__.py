"""The admission webhook: validates device pods (``POST /validate``) and normalises them
(``POST /mutate``), AdmissionReview ``admission.k8s.io/v1`` over HTTPS."""
