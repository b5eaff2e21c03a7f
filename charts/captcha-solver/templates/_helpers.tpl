{{/* vim: set filetype=mustache: */}}

{{/* ---- names ------------------------------------------------------------------------------------------ */}}

{{/* Chart name, overridable. */}}
{{- define "captcha-solver.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name (63 chars max: DNS names). Components append "-<component>", so cut to 50. */}}
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

{{- define "captcha-solver.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "captcha-solver.worker.fullname" -}}{{ include "captcha-solver.fullname" . }}-worker{{- end -}}
{{- define "captcha-solver.redis.fullname" -}}{{ include "captcha-solver.fullname" . }}-redis{{- end -}}
{{- define "captcha-solver.simulator.fullname" -}}{{ include "captcha-solver.fullname" . }}-simulator{{- end -}}

{{- define "captcha-solver.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "captcha-solver.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* ---- labels ----------------------------------------------------------------------------------------- */}}

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

{{/* ---- images ----------------------------------------------------------------------------------------- */}}

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

{{/* ---- restricted security contexts (ingress-nginx style: explicit values win, else the restricted default) */}}

{{/* Usage: include "captcha-solver.podSecurityContext" (dict "override" .Values.worker.podSecurityContext) */}}
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

{{/* ---- thread budget and replicas --------------------------------------------------------------------- */}}

{{/* The plan's cap on worker replicas: floor(threads / concurrency). */}}
{{- define "captcha-solver.replicaCap" -}}
{{- div (int .Values.captchaai.threads) (int .Values.worker.concurrency) -}}
{{- end -}}

{{/* KEDA maxReplicaCount: the cap, or a lower explicit keda.scaledObject.maxReplicaCount. */}}
{{- define "captcha-solver.maxReplicaCount" -}}
{{- $cap := include "captcha-solver.replicaCap" . | int -}}
{{- $explicit := .Values.keda.scaledObject.maxReplicaCount -}}
{{- if kindIs "invalid" $explicit -}}{{ $cap }}{{- else -}}{{ int $explicit }}{{- end -}}
{{- end -}}

{{/* The least number of worker pods: KEDA min, or fixed replicas. */}}
{{- define "captcha-solver.minReplicas" -}}
{{- if .Values.keda.enabled -}}{{ int .Values.keda.scaledObject.minReplicaCount }}{{- else -}}{{ int .Values.worker.replicas }}{{- end -}}
{{- end -}}

{{- define "captcha-solver.terminationGracePeriodSeconds" -}}
{{- $explicit := .Values.worker.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $explicit -}}
{{- add (int .Values.worker.drainGraceSeconds) (int .Values.worker.terminationGraceMarginSeconds) -}}
{{- else -}}
{{- int $explicit -}}
{{- end -}}
{{- end -}}

{{/* ---- Redis ------------------------------------------------------------------------------------------ */}}

{{- define "captcha-solver.redis.host" -}}
{{- if .Values.redis.enabled -}}
{{- printf "%s.%s.svc.%s" (include "captcha-solver.redis.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- else -}}
{{- .Values.externalRedis.host -}}
{{- end -}}
{{- end -}}

{{- define "captcha-solver.redis.port" -}}
{{- if .Values.redis.enabled -}}{{ int .Values.redis.port }}{{- else -}}{{ int .Values.externalRedis.port }}{{- end -}}
{{- end -}}

{{- define "captcha-solver.redis.db" -}}
{{- if .Values.redis.enabled -}}0{{- else -}}{{ int .Values.externalRedis.db }}{{- end -}}
{{- end -}}

{{- define "captcha-solver.redis.tls" -}}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.tls.enabled -}}true{{- end -}}
{{- end -}}

{{/* REDIS_URL without credentials (they come from REDIS_USERNAME / REDIS_PASSWORD). */}}
{{- define "captcha-solver.redis.url" -}}
{{- $scheme := ternary "rediss" "redis" (eq (include "captcha-solver.redis.tls" .) "true") -}}
{{- printf "%s://%s:%s/%s" $scheme (include "captcha-solver.redis.host" .) (include "captcha-solver.redis.port" .) (include "captcha-solver.redis.db" .) -}}
{{- end -}}

{{/* Name of the Secret holding the Redis password ("" when Redis has no auth). */}}
{{- define "captcha-solver.redis.secretName" -}}
{{- if .Values.redis.enabled -}}
{{- default (include "captcha-solver.redis.fullname" .) .Values.redis.auth.existingSecret -}}
{{- else if .Values.externalRedis.existingSecret -}}
{{- .Values.externalRedis.existingSecret -}}
{{- else if or .Values.externalRedis.password .Values.externalRedis.username -}}
{{- include "captcha-solver.redis.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "captcha-solver.redis.passwordKey" -}}
{{- if .Values.redis.enabled -}}
{{- ternary .Values.redis.auth.existingSecretPasswordKey "redis-password" (ne .Values.redis.auth.existingSecret "") -}}
{{- else -}}
{{- ternary .Values.externalRedis.existingSecretPasswordKey "redis-password" (ne .Values.externalRedis.existingSecret "") -}}
{{- end -}}
{{- end -}}

{{/* Whether the Redis Secret has a password ("true" or ""). */}}
{{- define "captcha-solver.redis.hasPassword" -}}
{{- if .Values.redis.enabled -}}true
{{- else if or .Values.externalRedis.existingSecret .Values.externalRedis.password -}}true
{{- end -}}
{{- end -}}

{{/* Key of the username in the Redis Secret ("" when there is no username). */}}
{{- define "captcha-solver.redis.usernameKey" -}}
{{- if not .Values.redis.enabled -}}
{{- if .Values.externalRedis.existingSecret -}}
{{- .Values.externalRedis.existingSecretUsernameKey -}}
{{- else if .Values.externalRedis.username -}}
redis-username
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The chart renders its own Redis Secret when it holds credentials it was given or generates. */}}
{{- define "captcha-solver.redis.createSecret" -}}
{{- if .Values.redis.enabled -}}
{{- if not .Values.redis.auth.existingSecret -}}true{{- end -}}
{{- else if and (not .Values.externalRedis.existingSecret) (or .Values.externalRedis.password .Values.externalRedis.username) -}}true
{{- end -}}
{{- end -}}

{{/*
Embedded Redis password: explicit value, else the one already in the cluster (lookup, so upgrades keep it),
else a new random one. `helm template` has no cluster, so it generates a new one each time.
*/}}
{{- define "captcha-solver.redis.password" -}}
{{- if .Values.redis.auth.password -}}
{{- .Values.redis.auth.password -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "captcha-solver.redis.fullname" .) -}}
{{- if and $existing (hasKey (default dict $existing.data) "redis-password") -}}
{{- index $existing.data "redis-password" | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* ---- API key Secret and URLs -------------------------------------------------------------------------- */}}

{{- define "captcha-solver.apiKeySecretName" -}}
{{- default (printf "%s-captchaai" (include "captcha-solver.fullname" .)) .Values.captchaai.existingSecret -}}
{{- end -}}

{{- define "captcha-solver.simulator.url" -}}
{{- printf "http://%s.%s.svc.%s:%d" (include "captcha-solver.simulator.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.simulator.port) -}}
{{- end -}}

{{- define "captcha-solver.captchaaiUrl" -}}
{{- if .Values.captchaai.url -}}
{{- .Values.captchaai.url -}}
{{- else if .Values.simulator.enabled -}}
{{- include "captcha-solver.simulator.url" . -}}
{{- end -}}
{{- end -}}

{{/* ---- worker environment ------------------------------------------------------------------------------ */}}

{{/* Names the user set in worker.extraEnv (they replace the chart's variables of the same name). */}}
{{- define "captcha-solver.worker.extraEnvNames" -}}
{{- $names := list -}}
{{- range .Values.worker.extraEnv -}}{{- $names = append $names .name -}}{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* Non-secret settings (the worker ConfigMap), as a YAML map. */}}
{{- define "captcha-solver.worker.config" -}}
{{- $cfg := dict
  "CAPTCHAAI_THREADS" (toString (int .Values.captchaai.threads))
  "CAPTCHAAI_MONTHLY_PRICE" (toString .Values.captchaai.monthlyPrice)
  "WORKER_CONCURRENCY" (toString (int .Values.worker.concurrency))
  "QUEUE_NAME" .Values.queue.name
  "REDIS_URL" (include "captcha-solver.redis.url" .)
  "METRICS_HOST" "0.0.0.0"
  "METRICS_PORT" (toString (int .Values.metrics.port))
  "LEASE_SECONDS" (toString (int .Values.queue.leaseSeconds))
  "MAX_ATTEMPTS" (toString (int .Values.queue.maxAttempts))
  "RESULT_TTL_SECONDS" (toString (int .Values.queue.resultTtlSeconds))
  "TASK_TTL_SECONDS" (toString (int .Values.queue.taskTtlSeconds))
  "DEAD_LETTER_MAX" (toString (int .Values.queue.deadLetterMax))
  "MAX_TASK_BYTES" (toString (int .Values.queue.maxTaskBytes))
  "SOLVE_TIMEOUT_SECONDS" (toString (int .Values.worker.solveTimeoutSeconds))
  "DRAIN_GRACE_SECONDS" (toString (int .Values.worker.drainGraceSeconds))
  "UNSOLVABLE_RETRIES" (toString (int .Values.worker.unsolvableRetries))
  "HTTP_TIMEOUT_SECONDS" (toString (int .Values.worker.httpTimeoutSeconds))
  "THREADSINFO_INTERVAL_SECONDS" (toString (int .Values.worker.threadsinfoIntervalSeconds))
  "COMPAT_RESULTS_HASH" (toString .Values.worker.compatResultsHash)
  "LOG_LEVEL" .Values.worker.logLevel
-}}
{{- $url := include "captcha-solver.captchaaiUrl" . -}}
{{- if $url }}{{- $_ := set $cfg "CAPTCHAAI_URL" $url -}}{{- end -}}
{{- with .Values.compat.queueList }}{{- $_ := set $cfg "COMPAT_QUEUE_LIST" . -}}{{- end -}}
{{- if eq (include "captcha-solver.redis.tls" .) "true" -}}
{{- $_ := set $cfg "REDIS_TLS_INSECURE" (toString .Values.externalRedis.tls.insecureSkipVerify) -}}
{{- if .Values.externalRedis.tls.caSecret -}}
{{- $_ := set $cfg "REDIS_TLS_CA_FILE" (printf "/etc/captcha-solver/redis-ca/%s" .Values.externalRedis.tls.caSecretKey) -}}
{{- end -}}
{{- end -}}
{{- range (include "captcha-solver.worker.extraEnvNames" . | fromJsonArray) -}}
{{- $_ := unset $cfg . -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Secret-backed env plus worker.extraEnv, merged by name (extraEnv wins), as a YAML list. */}}
{{- define "captcha-solver.worker.env" -}}
{{- $env := list -}}
{{- $env = append $env (dict "name" "CAPTCHAAI_KEY" "valueFrom" (dict "secretKeyRef" (dict "name" (include "captcha-solver.apiKeySecretName" .) "key" .Values.captchaai.existingSecretKey))) -}}
{{- $secret := include "captcha-solver.redis.secretName" . -}}
{{- if $secret -}}
{{- $ukey := include "captcha-solver.redis.usernameKey" . -}}
{{- if $ukey -}}
{{- $env = append $env (dict "name" "REDIS_USERNAME" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" $ukey))) -}}
{{- end -}}
{{- if include "captcha-solver.redis.hasPassword" . -}}
{{- $env = append $env (dict "name" "REDIS_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" (include "captcha-solver.redis.passwordKey" .)))) -}}
{{- end -}}
{{- end -}}
{{- $extraNames := include "captcha-solver.worker.extraEnvNames" . | fromJsonArray -}}
{{- $merged := list -}}
{{- range $env -}}{{- if not (has .name $extraNames) -}}{{- $merged = append $merged . -}}{{- end -}}{{- end -}}
{{- range .Values.worker.extraEnv -}}{{- $merged = append $merged . -}}{{- end -}}
{{- toYaml $merged -}}
{{- end -}}

{{/* envFrom: the chart's ConfigMap, then the user's sources. */}}
{{- define "captcha-solver.worker.envFrom" -}}
- configMapRef:
    name: {{ include "captcha-solver.worker.fullname" . }}
{{- with .Values.worker.envFrom }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes and mounts every worker-image container needs (writable /tmp, optional Redis CA). */}}
{{- define "captcha-solver.worker.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if and (eq (include "captcha-solver.redis.tls" .) "true") .Values.externalRedis.tls.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .Values.externalRedis.tls.caSecret }}
    items:
      - key: {{ .Values.externalRedis.tls.caSecretKey }}
        path: {{ .Values.externalRedis.tls.caSecretKey }}
{{- end }}
{{- with .Values.worker.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "captcha-solver.worker.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and (eq (include "captcha-solver.redis.tls" .) "true") .Values.externalRedis.tls.caSecret }}
- name: redis-ca
  mountPath: /etc/captcha-solver/redis-ca
  readOnly: true
{{- end }}
{{- with .Values.worker.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Checksums that roll the worker pods when their configuration changes. */}}
{{- define "captcha-solver.worker.checksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/worker-configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- /* The generated Redis password is random per render but stable in the cluster (lookup): hash only what the user controls. */}}
checksum/redis-auth: {{ list .Values.redis.auth.password .Values.redis.auth.existingSecret .Values.externalRedis.password .Values.externalRedis.username .Values.externalRedis.existingSecret | toJson | sha256sum }}
{{- end -}}

{{/* ---- validation (bitnami style: collect every message, fail once) ----------------------------------- */}}

{{- define "captcha-solver.validateValues" -}}
{{- $msgs := list -}}
{{- $threads := int .Values.captchaai.threads -}}
{{- $conc := int .Values.worker.concurrency -}}
{{- if gt $conc $threads -}}
{{- $msgs = append $msgs (printf "worker.concurrency (%d) is larger than captchaai.threads (%d): one worker would hold more solves than the plan has threads. Set worker.concurrency <= captchaai.threads." $conc $threads) -}}
{{- else -}}
{{- $cap := include "captcha-solver.replicaCap" . | int -}}
{{- if .Values.keda.enabled -}}
{{- $max := include "captcha-solver.maxReplicaCount" . | int -}}
{{- $min := int .Values.keda.scaledObject.minReplicaCount -}}
{{- if gt $max $cap -}}
{{- $msgs = append $msgs (printf "keda.scaledObject.maxReplicaCount (%d) exceeds the plan's cap floor(captchaai.threads / worker.concurrency) = floor(%d / %d) = %d. Lower it or leave it null." $max $threads $conc $cap) -}}
{{- end -}}
{{- if lt $max 1 -}}
{{- $msgs = append $msgs "keda.scaledObject.maxReplicaCount must be at least 1." -}}
{{- end -}}
{{- if gt $min $max -}}
{{- $msgs = append $msgs (printf "keda.scaledObject.minReplicaCount (%d) is greater than maxReplicaCount (%d = floor(captchaai.threads %d / worker.concurrency %d) unless set lower). Lower minReplicaCount or buy more threads." $min $max $threads $conc) -}}
{{- end -}}
{{- if and .Values.keda.scaledObject.fallback.enabled (gt (int .Values.keda.scaledObject.fallback.replicas) $max) -}}
{{- $msgs = append $msgs (printf "keda.scaledObject.fallback.replicas (%d) is greater than maxReplicaCount (%d)." (int .Values.keda.scaledObject.fallback.replicas) $max) -}}
{{- end -}}
{{- else -}}
{{- $replicas := int .Values.worker.replicas -}}
{{- if gt (mul $replicas $conc) $threads -}}
{{- $msgs = append $msgs (printf "worker.replicas (%d) x worker.concurrency (%d) = %d exceeds captchaai.threads (%d): with keda.enabled=false use at most %d replicas." $replicas $conc (mul $replicas $conc) $threads $cap) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if lt (int .Values.worker.drainGraceSeconds) (int .Values.worker.solveTimeoutSeconds) -}}
{{- $msgs = append $msgs (printf "worker.drainGraceSeconds (%d) is shorter than worker.solveTimeoutSeconds (%d): a draining pod could not finish its longest solve." (int .Values.worker.drainGraceSeconds) (int .Values.worker.solveTimeoutSeconds)) -}}
{{- end -}}
{{- $grace := include "captcha-solver.terminationGracePeriodSeconds" . | int -}}
{{- if le $grace (int .Values.worker.drainGraceSeconds) -}}
{{- $msgs = append $msgs (printf "worker.terminationGracePeriodSeconds (%d) must be greater than worker.drainGraceSeconds (%d), or Kubernetes kills the worker before its drain ends." $grace (int .Values.worker.drainGraceSeconds)) -}}
{{- end -}}
{{- if and .Values.redis.enabled .Values.externalRedis.host -}}
{{- $msgs = append $msgs "Both redis.enabled=true and externalRedis.host are set: choose one (set redis.enabled=false to use the external Redis)." -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.host) -}}
{{- $msgs = append $msgs "No Redis configured: set redis.enabled=true (embedded) or externalRedis.host." -}}
{{- end -}}
{{- if and .Values.redis.auth.password .Values.redis.auth.existingSecret -}}
{{- $msgs = append $msgs "Set redis.auth.password or redis.auth.existingSecret, not both." -}}
{{- end -}}
{{- if and .Values.externalRedis.password .Values.externalRedis.existingSecret -}}
{{- $msgs = append $msgs "Set externalRedis.password or externalRedis.existingSecret, not both." -}}
{{- end -}}
{{- if and .Values.externalRedis.username .Values.externalRedis.existingSecret -}}
{{- $msgs = append $msgs "externalRedis.username is ignored with externalRedis.existingSecret: put the username in that Secret and set externalRedis.existingSecretUsernameKey." -}}
{{- end -}}
{{- if and .Values.externalRedis.username (not .Values.externalRedis.password) (not .Values.externalRedis.existingSecret) -}}
{{- $msgs = append $msgs "externalRedis.username is set without a password: set externalRedis.password or externalRedis.existingSecret." -}}
{{- end -}}
{{- if and .Values.externalRedis.tls.caSecret (not .Values.externalRedis.tls.enabled) -}}
{{- $msgs = append $msgs "externalRedis.tls.caSecret is set but externalRedis.tls.enabled is false." -}}
{{- end -}}
{{- if and .Values.captchaai.apiKey .Values.captchaai.existingSecret -}}
{{- $msgs = append $msgs "Set captchaai.apiKey or captchaai.existingSecret, not both." -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) -}}
{{- if ge (int .Values.podDisruptionBudget.minAvailable) (include "captcha-solver.minReplicas" . | int) -}}
{{- if gt (include "captcha-solver.minReplicas" . | int) 1 -}}
{{- $msgs = append $msgs (printf "podDisruptionBudget.minAvailable (%d) must be lower than the minimum replicas (%d), or no node could ever be drained." (int .Values.podDisruptionBudget.minAvailable) (include "captcha-solver.minReplicas" . | int)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $msgs -}}
{{- fail (printf "\n\nVALUES VALIDATION:\n  - %s\n" (join "\n  - " $msgs)) -}}
{{- end -}}
{{- end -}}
