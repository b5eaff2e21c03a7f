{{/* vim: set filetype=mustache: */}}
{{/* Resource names. Kubernetes limits: DNS labels (Services) 63 characters; a StatefulSet name 52, because its pods
     carry the label controller-revision-hash=<name>-<10-character hash> (63 at most). Helm limits release names to
     53 characters; every name below fits for any release name Helm accepts. */}}

{{/* Chart name, overridable. */}}
{{- define "captcha-solver.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name, cut to 50 characters: components append "-<component>". */}}
{{- define "captcha-solver.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>" within max characters (default 63): the fullname is cut, the suffix kept.
     Usage: include "captcha-solver.componentName" (dict "ctx" $ "component" "redis" "max" 52) */}}
{{- define "captcha-solver.componentName" -}}
{{- $suffix := printf "-%s" .component -}}
{{- $room := sub (int (default 63 .max)) (len $suffix) | int -}}
{{- printf "%s%s" (include "captcha-solver.fullname" .ctx | trunc $room | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "captcha-solver.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "captcha-solver.worker.fullname" -}}{{ include "captcha-solver.componentName" (dict "ctx" . "component" "worker") }}{{- end -}}
{{- define "captcha-solver.simulator.fullname" -}}{{ include "captcha-solver.componentName" (dict "ctx" . "component" "simulator") }}{{- end -}}
{{/* 52: the Redis StatefulSet, its Service, ConfigMap and Secret share this name; "-headless" still fits 63. */}}
{{- define "captcha-solver.redis.fullname" -}}{{ include "captcha-solver.componentName" (dict "ctx" . "component" "redis" "max" 52) }}{{- end -}}
{{- define "captcha-solver.redis.headlessName" -}}{{ include "captcha-solver.redis.fullname" . }}-headless{{- end -}}

{{- define "captcha-solver.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "captcha-solver.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "captcha-solver.apiKeySecretName" -}}
{{- default (printf "%s-captchaai" (include "captcha-solver.fullname" .)) .Values.captchaai.existingSecret -}}
{{- end -}}
