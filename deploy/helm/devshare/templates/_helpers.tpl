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
