{{/* vim: set filetype=mustache: */}}
{{/* The worker: its configuration (ConfigMap + Secret-backed env), volumes, termination and roll checksums. The
     helm test pod and the simulator run the same image with the same helpers. */}}

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

{{/* Threads the simulator serves: simulator.threads, else the plan's captchaai.threads. */}}
{{- define "captcha-solver.simulator.threads" -}}
{{- if kindIs "invalid" .Values.simulator.threads -}}{{ int .Values.captchaai.threads }}{{- else -}}{{ int .Values.simulator.threads }}{{- end -}}
{{- end -}}

{{/* Seconds a preStop hook of worker.lifecycle takes before SIGTERM reaches the worker: a `sleep` action, or an
     exec command that sleeps ("sleep N", ["sleep", "N"], ["sh", "-c", "sleep N"]). 0 without one. */}}
{{- define "captcha-solver.worker.preStopSeconds" -}}
{{- $pre := dig "preStop" dict .Values.worker.lifecycle -}}
{{- if dig "sleep" "seconds" "" $pre -}}
{{- int (dig "sleep" "seconds" 0 $pre) -}}
{{- else -}}
{{- $cmd := join " " (dig "exec" "command" list $pre) -}}
{{- $m := regexFind "sleep +[0-9]+" $cmd -}}
{{- if $m -}}{{- regexFind "[0-9]+" $m -}}{{- else -}}0{{- end -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: explicit, else preStop + drainGraceSeconds + terminationGraceMarginSeconds (the
     kubelet counts a preStop hook in the grace period: SIGTERM reaches the worker only after it). */}}
{{- define "captcha-solver.terminationGracePeriodSeconds" -}}
{{- $explicit := .Values.worker.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $explicit -}}
{{- add (include "captcha-solver.worker.preStopSeconds" . | int) (int .Values.worker.drainGraceSeconds) (int .Values.worker.terminationGraceMarginSeconds) -}}
{{- else -}}
{{- int $explicit -}}
{{- end -}}
{{- end -}}

{{/* Seconds the pre-upgrade hook holds the new limit: worker.limitHook.holdSeconds, else the termination grace
     period + 60 (the old pods are gone, or a new pod enforces the same limit, well before). */}}
{{- define "captcha-solver.worker.limitHoldSeconds" -}}
{{- $explicit := .Values.worker.limitHook.holdSeconds -}}
{{- if kindIs "invalid" $explicit -}}
{{- add (include "captcha-solver.terminationGracePeriodSeconds" . | int) 60 -}}
{{- else -}}
{{- int $explicit -}}
{{- end -}}
{{- end -}}

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
  "POLL_DENSE_WHEN_CONTENDED" (toString .Values.worker.pollDenseWhenContended)
  "COMPAT_RESULTS_HASH" (toString .Values.worker.compatResultsHash)
  "LOG_LEVEL" .Values.worker.logLevel
-}}
{{- $url := include "captcha-solver.captchaaiUrl" . -}}
{{- if $url }}{{- $_ := set $cfg "CAPTCHAAI_URL" $url -}}{{- end -}}
{{- with .Values.compat.queueList }}{{- $_ := set $cfg "COMPAT_QUEUE_LIST" . -}}{{- end -}}
{{- with include "captcha-solver.providers.json" . }}{{- $_ := set $cfg "PROVIDERS" . -}}{{- end -}}
{{- if .Values.pingback.enabled -}}
{{- $_ := set $cfg "PINGBACK_URL" (trimSuffix "/" .Values.pingback.url) -}}
{{- $_ := set $cfg "PINGBACK_HOST" "0.0.0.0" -}}
{{- $_ := set $cfg "PINGBACK_PORT" (toString (int .Values.pingback.port)) -}}
{{- end -}}
{{- $_ := merge $cfg (include "captcha-solver.worker.redisConfig" . | fromYaml) -}}
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

{{/* Where Redis is (REDIS_MODE and its addresses; sentinel mode has no REDIS_URL) and the durability setting. */}}
{{- define "captcha-solver.worker.redisConfig" -}}
{{- $mode := include "captcha-solver.redis.mode" . -}}
{{- $cfg := dict "REDIS_MODE" $mode -}}
{{- if eq $mode "sentinel" -}}
{{- $_ := set $cfg "REDIS_SENTINELS" (include "captcha-solver.redis.sentinels" .) -}}
{{- $_ := set $cfg "REDIS_SENTINEL_MASTER" .Values.externalRedis.sentinel.masterName -}}
{{- $_ := set $cfg "REDIS_TLS" (ternary "true" "false" (eq (include "captcha-solver.redis.tls" .) "true")) -}}
{{- else -}}
{{- $_ := set $cfg "REDIS_URL" (include "captcha-solver.redis.url" .) -}}
{{- end -}}
{{- if and (eq $mode "cluster") .Values.externalRedis.cluster.nodes -}}
{{- $_ := set $cfg "REDIS_CLUSTER_NODES" (join "," .Values.externalRedis.cluster.nodes) -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.waitReplicas -}}
{{- $_ := set $cfg "REDIS_WAIT_REPLICAS" (toString (int .Values.externalRedis.waitReplicas)) -}}
{{- $_ := set $cfg "REDIS_WAIT_TIMEOUT_MS" (toString (int .Values.externalRedis.waitTimeoutMs)) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Secret-backed env plus worker.extraEnv, merged by name (extraEnv wins), as a YAML list. */}}
{{- define "captcha-solver.worker.env" -}}
{{- $env := list -}}
{{- $extraNames := include "captcha-solver.worker.extraEnvNames" . | fromJsonArray -}}
{{- if not (has "CAPTCHAAI_KEY" $extraNames) -}}
{{- /* The key as a file of the mounted Secret (worker.volumes), re-read while running: a Secret update reaches the pods. */ -}}
{{- $env = append $env (dict "name" "CAPTCHAAI_KEY_FILE" "value" (include "captcha-solver.apiKeyFile" .)) -}}
{{- end -}}
{{- $secret := include "captcha-solver.redis.secretName" . -}}
{{- if $secret -}}
{{- $ukey := include "captcha-solver.redis.usernameKey" . -}}
{{- if $ukey -}}
{{- $env = append $env (dict "name" "REDIS_USERNAME" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" $ukey))) -}}
{{- end -}}
{{- if include "captcha-solver.redis.hasPassword" . -}}
{{- $env = append $env (dict "name" "REDIS_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" (include "captcha-solver.redis.passwordKey" .)))) -}}
{{- end -}}
{{- with include "captcha-solver.redis.sentinelUsernameKey" . -}}
{{- $env = append $env (dict "name" "REDIS_SENTINEL_USERNAME" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" .))) -}}
{{- end -}}
{{- with include "captcha-solver.redis.sentinelPasswordKey" . -}}
{{- $env = append $env (dict "name" "REDIS_SENTINEL_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" $secret "key" .))) -}}
{{- end -}}
{{- end -}}
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

{{/* Where the API key's Secret is mounted (a directory: a subPath mount would never see an update). */}}
{{- define "captcha-solver.apiKeyDir" -}}/etc/captcha-solver/captchaai{{- end -}}
{{- define "captcha-solver.apiKeyFile" -}}{{ include "captcha-solver.apiKeyDir" . }}/{{ .Values.captchaai.existingSecretKey }}{{- end -}}

{{/* Volumes and mounts every worker-image container needs (writable /tmp, the API key, optional Redis CA). */}}
{{- define "captcha-solver.worker.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
- name: captchaai-key
  secret:
    secretName: {{ include "captcha-solver.apiKeySecretName" . }}
    defaultMode: 0444
    items:
      - key: {{ .Values.captchaai.existingSecretKey }}
        path: {{ .Values.captchaai.existingSecretKey }}
{{- if and (eq (include "captcha-solver.redis.tls" .) "true") .Values.externalRedis.tls.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .Values.externalRedis.tls.caSecret }}
    items:
      - key: {{ .Values.externalRedis.tls.caSecretKey }}
        path: {{ .Values.externalRedis.tls.caSecretKey }}
{{- end }}
{{- include "captcha-solver.providers.volumes" . }}
{{- with .Values.worker.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "captcha-solver.worker.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: captchaai-key
  mountPath: {{ include "captcha-solver.apiKeyDir" . }}
  readOnly: true
{{- if and (eq (include "captcha-solver.redis.tls" .) "true") .Values.externalRedis.tls.caSecret }}
- name: redis-ca
  mountPath: /etc/captcha-solver/redis-ca
  readOnly: true
{{- end }}
{{- include "captcha-solver.providers.volumeMounts" . }}
{{- with .Values.worker.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Checksums that roll the worker pods when their configuration changes: of the settings themselves, never of
     whole rendered files (those carry the chart version in their labels: a chart bump would roll every pod). */}}
{{- define "captcha-solver.worker.checksums" -}}
checksum/config: {{ include "captcha-solver.worker.config" . | sha256sum }}
{{- /* The Secret's name and key, not its content: the workers re-read the mounted key file (CAPTCHAAI_KEY_FILE), so a new key needs no restart. */}}
checksum/secret: {{ list (include "captcha-solver.apiKeySecretName" .) .Values.captchaai.existingSecretKey | toJson | sha256sum }}
{{- /* The generated Redis password is random per render but stable in the cluster (lookup): hash only what the user controls. */}}
checksum/redis-auth: {{ list .Values.redis.auth.password .Values.redis.auth.existingSecret .Values.externalRedis.password .Values.externalRedis.username .Values.externalRedis.existingSecret .Values.externalRedis.sentinel.password .Values.externalRedis.sentinel.username | toJson | sha256sum }}
{{- end -}}
