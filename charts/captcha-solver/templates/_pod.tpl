{{/* vim: set filetype=mustache: */}}
{{/* What every pod of the chart shares: image references, pull secrets, the restricted security contexts. */}}

{{/* Usage: include "captcha-solver.image" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) */}}
{{- define "captcha-solver.image" -}}
{{- $repo := .image.repository -}}
{{- if .image.registry -}}{{- $repo = printf "%s/%s" .image.registry .image.repository -}}{{- end -}}
{{- $tag := default .defaultTag .image.tag | toString -}}
{{- if .image.digest -}}
{{- printf "%s:%s@%s" $repo $tag .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{- define "captcha-solver.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* Restricted security contexts (ingress-nginx style: an explicit value wins, else the restricted default).
     Usage: include "captcha-solver.podSecurityContext" (dict "override" .Values.worker.podSecurityContext) */}}
{{- define "captcha-solver.podSecurityContext" -}}
{{- if .override -}}
{{- toYaml .override -}}
{{- else -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}

{{/* Usage: include "captcha-solver.containerSecurityContext" (dict "override" .Values.worker.containerSecurityContext) */}}
{{- define "captcha-solver.containerSecurityContext" -}}
{{- if .override -}}
{{- toYaml .override -}}
{{- else -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}

{{/* Bytes of a Kubernetes quantity ("256Mi", "1G", "268435456", "1.5Gi"); "" when empty or not understood. */}}
{{- define "captcha-solver.quantityBytes" -}}
{{- $q := toString . -}}
{{- $units := dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $suffix := trimPrefix $number $q -}}
{{- if and $number (hasKey $units $suffix) -}}
{{- printf "%.0f" (mulf (float64 $number) (get $units $suffix)) -}}
{{- end -}}
{{- end -}}
