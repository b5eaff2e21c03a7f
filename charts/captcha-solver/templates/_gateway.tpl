{{/*
The gateway (captcha-worker gateway): names shared by its templates and the alert rules.
*/}}

{{/* The gateway Deployment / Service name: <fullname>-gateway (its metrics' `job` label under a ServiceMonitor). */}}
{{- define "captcha-solver.gateway.fullname" -}}{{ include "captcha-solver.fullname" . | trunc 55 | trimSuffix "-" }}-gateway{{- end -}}
