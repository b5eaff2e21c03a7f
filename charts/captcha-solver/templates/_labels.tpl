{{/* vim: set filetype=mustache: */}}
{{/* Labels. Resource metadata carries the chart and app versions; pod templates do not, so a chart bump alone never
     restarts a pod (Redis least of all). */}}

{{- define "captcha-solver.selectorLabels" -}}
app.kubernetes.io/name: {{ include "captcha-solver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "captcha-solver.labels" -}}
helm.sh/chart: {{ include "captcha-solver.chart" . }}
{{ include "captcha-solver.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: captcha-solver
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Usage: include "captcha-solver.componentLabels" (dict "ctx" $ "component" "worker") */}}
{{- define "captcha-solver.componentLabels" -}}
{{ include "captcha-solver.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "captcha-solver.componentSelectorLabels" -}}
{{ include "captcha-solver.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Pod template labels: stable across chart versions (no helm.sh/chart, no app.kubernetes.io/version).
     Usage: include "captcha-solver.podLabels" (dict "ctx" $ "component" "redis" "extra" .Values.worker.podLabels) */}}
{{- define "captcha-solver.podLabels" -}}
{{ include "captcha-solver.componentSelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: captcha-solver
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}
