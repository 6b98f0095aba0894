{{/* Labels every object gets: the kustomize folders' part-of, plus Helm's own. */}}
{{- define "devshare.labels" -}}
app.kubernetes.io/part-of: devshare
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "devshare.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The extender's read-only listener: serviceMonitor.enabled needs one (9888 unless set). */}}
{{- define "devshare.metricsPort" -}}
{{- if .Values.scheduler.metricsPort -}}
{{ .Values.scheduler.metricsPort }}
{{- else if .Values.serviceMonitor.enabled -}}
9888
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* kube-scheduler's image: scheduler.image, else registry.k8s.io/kube-scheduler at the cluster's
version (the API server's vMAJOR.MINOR.PATCH, a managed cluster's suffix dropped), as the version skew
policy wants: a newer kube-scheduler watches APIs an older API server does not serve. */}}
{{- define "devshare.schedulerImage" -}}
{{- if .Values.scheduler.image -}}
{{ .Values.scheduler.image }}
{{- else -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
registry.k8s.io/kube-scheduler:v{{ $v.Major }}.{{ $v.Minor }}.{{ $v.Patch }}
{{- end -}}
{{- end -}}

{{/* Where a component's pods run and what they carry, from its values (dict "c" <component values>
"root" $): image pull secrets, priority class, node selector, tolerations, affinity. */}}
{{- define "devshare.podPlacement" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* --log-level for the extender, the webhook and the agent; nothing at the default (info). */}}
{{- define "devshare.logLevelArg" -}}
{{- if ne .Values.logLevel "info" -}}
--log-level={{ .Values.logLevel }}
{{- end -}}
{{- end -}}

{{/* The webhook's serving certificate, as JSON {ca, cert, key} (PEM; empty strings where the chart
does not hold them). Made once per rendering (kept in .Values for every template that asks):
- certManager.enabled: none (cert-manager issues the Secret and injects the CA);
- tls.cert and tls.key given: those, with caBundle as the CA;
- caBundle alone: the Secret devshare-webhook-tls is the operator's;
- nothing given: the Secret already installed when there is one (helm upgrade keeps the certificate),
  else a new CA (genCA) and a serving certificate for the Service (genSignedCert), 10 years. */}}
{{- define "devshare.webhookTLS" -}}
{{- if not (hasKey .Values "devshareWebhookTLS") -}}
{{- $w := .Values.webhook -}}
{{- $tls := dict "ca" "" "cert" "" "key" "" "generated" false -}}
{{- if $w.certManager.enabled -}}
{{- else if and $w.tls.cert $w.tls.key -}}
{{- $_ := set $tls "cert" $w.tls.cert -}}
{{- $_ := set $tls "key" $w.tls.key -}}
{{- if $w.caBundle }}{{ $_ := set $tls "ca" ($w.caBundle | trim | b64dec) }}{{ end -}}
{{- else if $w.caBundle -}}
{{- $_ := set $tls "ca" ($w.caBundle | trim | b64dec) -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace "devshare-webhook-tls" -}}
{{- if and $old (index ($old.data | default dict) "ca.crt") (index ($old.data | default dict) "tls.crt") (index ($old.data | default dict) "tls.key") -}}
{{- $_ := set $tls "ca" (index $old.data "ca.crt" | b64dec) -}}
{{- $_ := set $tls "cert" (index $old.data "tls.crt" | b64dec) -}}
{{- $_ := set $tls "key" (index $old.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $svc := printf "devshare-webhook.%s.svc" .Release.Namespace -}}
{{- $ca := genCA "devshare-webhook-ca" 3650 -}}
{{- $cert := genSignedCert $svc nil (list "devshare-webhook" (printf "devshare-webhook.%s" .Release.Namespace) $svc (printf "%s.cluster.local" $svc)) 3650 $ca -}}
{{- $_ := set $tls "ca" $ca.Cert -}}
{{- $_ := set $tls "cert" $cert.Cert -}}
{{- $_ := set $tls "key" $cert.Key -}}
{{- end -}}
{{- $_ := set $tls "generated" true -}}
{{- end -}}
{{- $_ := set .Values "devshareWebhookTLS" $tls -}}
{{- end -}}
{{- toJson .Values.devshareWebhookTLS -}}
{{- end -}}
