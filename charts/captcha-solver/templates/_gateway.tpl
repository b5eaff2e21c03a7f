{{/*
The gateway (captcha-worker gateway, docs/gateway.md): names, its tenants file, its environment (its values checks: validate.gateway in _validate.tpl).
Its templates are gateway-*.yaml; every one renders only with gateway.enabled.
*/}}

{{/* The gateway Deployment / Service name: <fullname>-gateway (its metrics' `job` label under a ServiceMonitor). */}}
{{- define "captcha-solver.gateway.fullname" -}}{{ include "captcha-solver.fullname" . | trunc 55 | trimSuffix "-" }}-gateway{{- end -}}

{{/* The Secret with the tenants' keys and pingback secrets (`<tenant>.key`, `<tenant>.pingback-secret`). */}}
{{- define "captcha-solver.gateway.secretName" -}}
{{- .Values.gateway.existingSecret | default (include "captcha-solver.gateway.fullname" .) -}}
{{- end -}}

{{/* GATEWAY_TENANTS as the gateway reads it: names and shares only; keys and secrets come from the Secret. */}}
{{- define "captcha-solver.gateway.tenantsJson" -}}
{{- $tenants := list -}}
{{- range .Values.gateway.tenants -}}
{{- $t := dict "name" .name "threads" (int .threads) "reserved" (int (.reserved | default 0)) "balance" (.balance | default 0) -}}
{{- with .rateLimit -}}
{{- $rl := dict "requests_per_second" .requestsPerSecond -}}
{{- if .burst }}{{- $_ := set $rl "burst" (int .burst) -}}{{- end -}}
{{- $_ := set $t "rate_limit" $rl -}}
{{- end -}}
{{- if .pingbackHosts -}}
{{- $_ := set $t "pingback" (dict "hosts" .pingbackHosts "networks" (.pingbackNetworks | default list)) -}}
{{- end -}}
{{- $tenants = append $tenants $t -}}
{{- end -}}
{{- dict "tenants" $tenants | toJson -}}
{{- end -}}

{{/* Non-secret settings (the gateway ConfigMap's environment), as a YAML map. */}}
{{- define "captcha-solver.gateway.config" -}}
{{- $g := .Values.gateway -}}
{{- $cfg := dict
  "GATEWAY_TENANTS" "/etc/captcha-gateway/tenants/tenants.json"
  "GATEWAY_SECRETS_DIR" "/etc/captcha-gateway/secrets"
  "GATEWAY_HOST" "0.0.0.0"
  "GATEWAY_PORT" (toString (int $g.port))
  "METRICS_HOST" "0.0.0.0"
  "METRICS_PORT" (toString (int .Values.metrics.port))
  "QUEUE_NAME" .Values.queue.name
  "REDIS_URL" (include "captcha-solver.redis.url" .)
  "TASK_TTL_SECONDS" (toString (int .Values.queue.taskTtlSeconds))
  "MAX_TASK_BYTES" (toString (int .Values.queue.maxTaskBytes))
  "GATEWAY_MAX_BODY_BYTES" (toString (int ($g.maxBodyBytes | default .Values.queue.maxTaskBytes)))
  "GATEWAY_TASK_DEADLINE_SECONDS" (toString (int $g.taskDeadlineSeconds))
  "GATEWAY_SOLVE_TIMEOUT_SECONDS" (toString (int $g.solveTimeoutSeconds))
  "GATEWAY_CALLBACK_TIMEOUT_SECONDS" (toString $g.callbacks.timeoutSeconds)
  "GATEWAY_CALLBACK_ATTEMPTS" (toString (int $g.callbacks.attempts))
  "GATEWAY_UPSTREAM_BALANCE" (toString $g.upstreamBalance)
  "CAPTCHAAI_THREADS" (toString (int .Values.captchaai.threads))
  "LOG_LEVEL" $g.logLevel
-}}
{{- $url := include "captcha-solver.captchaaiUrl" . -}}
{{- if $url }}{{- $_ := set $cfg "CAPTCHAAI_URL" $url -}}{{- end -}}
{{- if eq (include "captcha-solver.redis.tls" .) "true" -}}
{{- $_ := set $cfg "REDIS_TLS_INSECURE" (toString .Values.externalRedis.tls.insecureSkipVerify) -}}
{{- if .Values.externalRedis.tls.caSecret -}}
{{- $_ := set $cfg "REDIS_TLS_CA_FILE" (printf "/etc/captcha-solver/redis-ca/%s" .Values.externalRedis.tls.caSecretKey) -}}
{{- end -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Whether the gateway holds the plan's key: to forward reports (gateway.forwardReports) or read the plan's balance. */}}
{{- define "captcha-solver.gateway.plansKey" -}}
{{- if or .Values.gateway.forwardReports .Values.gateway.upstreamBalance -}}true{{- end -}}
{{- end -}}

{{/* Secret-backed env: the plan's key as a file (CAPTCHAAI_KEY_FILE, re-read while running: a Secret update
     reaches the pods without a restart) and Redis credentials. */}}
{{- define "captcha-solver.gateway.env" -}}
{{- $env := list -}}
{{- if include "captcha-solver.gateway.plansKey" . -}}
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
{{- end -}}
{{- toYaml $env -}}
{{- end -}}

{{/* Checksums that roll the gateway pods when their tenants or secrets change. */}}
{{- define "captcha-solver.gateway.checksums" -}}
{{- /* the ConfigMap's data only: its labels carry the chart version, and a chart bump must restart no pod */}}
checksum/config: {{ list (include "captcha-solver.gateway.tenantsJson" .) (include "captcha-solver.gateway.config" .) | toJson | sha256sum }}
checksum/tenants: {{ .Values.gateway.tenants | toJson | sha256sum }}
{{- end -}}
