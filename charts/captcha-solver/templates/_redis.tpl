{{/* vim: set filetype=mustache: */}}
{{/* Redis: where it is, how to authenticate, and the embedded server's configuration. */}}

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

{{/* REDIS_MODE: standalone (always for the embedded Redis), sentinel or cluster. */}}
{{- define "captcha-solver.redis.mode" -}}
{{- if .Values.redis.enabled -}}standalone{{- else -}}{{ .Values.externalRedis.mode }}{{- end -}}
{{- end -}}

{{/* The sentinels as host:port,host:port (the default port 26379 added where none is given). */}}
{{- define "captcha-solver.redis.sentinels" -}}
{{- $out := list -}}
{{- range .Values.externalRedis.sentinel.hosts -}}
{{- $out = append $out (ternary . (printf "%s:26379" .) (regexMatch ":[0-9]+$" .)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* Every address KEDA's scaler starts from: the server (standalone), the sentinels, or the seed nodes. */}}
{{- define "captcha-solver.redis.addresses" -}}
{{- $mode := include "captcha-solver.redis.mode" . -}}
{{- if eq $mode "sentinel" -}}
{{- include "captcha-solver.redis.sentinels" . -}}
{{- else -}}
{{- $seed := printf "%s:%s" (include "captcha-solver.redis.host" .) (include "captcha-solver.redis.port" .) -}}
{{- if eq $mode "cluster" -}}{{- join "," (prepend .Values.externalRedis.cluster.nodes $seed | uniq) -}}{{- else -}}{{ $seed }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* The external Redis' TCP ports, as a JSON list: `port` (the server, the seed node, or the data nodes the sentinels
     announce) and the ports of the sentinels and of further cluster nodes. */}}
{{- define "captcha-solver.redis.egressPorts" -}}
{{- $ports := list (int .Values.externalRedis.port) -}}
{{- $mode := .Values.externalRedis.mode -}}
{{- $more := ternary (splitList "," (include "captcha-solver.redis.sentinels" .)) .Values.externalRedis.cluster.nodes (eq $mode "sentinel") -}}
{{- range $more -}}
{{- with regexFind ":[0-9]+$" . -}}{{- $ports = append $ports (trimPrefix ":" . | int) -}}{{- end -}}
{{- end -}}
{{- toJson ($ports | uniq) -}}
{{- end -}}

{{/* Keys of the sentinel credentials in the Redis Secret ("" when the sentinels take none). */}}
{{- define "captcha-solver.redis.sentinelPasswordKey" -}}
{{- $s := .Values.externalRedis.sentinel -}}
{{- if and (not .Values.redis.enabled) (eq .Values.externalRedis.mode "sentinel") -}}
{{- if .Values.externalRedis.existingSecret -}}{{ $s.existingSecretPasswordKey }}{{- else if $s.password -}}redis-sentinel-password{{- end -}}
{{- end -}}
{{- end -}}

{{- define "captcha-solver.redis.sentinelUsernameKey" -}}
{{- $s := .Values.externalRedis.sentinel -}}
{{- if and (not .Values.redis.enabled) (eq .Values.externalRedis.mode "sentinel") -}}
{{- if .Values.externalRedis.existingSecret -}}{{ $s.existingSecretUsernameKey }}{{- else if $s.username -}}redis-sentinel-username{{- end -}}
{{- end -}}
{{- end -}}

{{/* REDIS_URL without credentials (they come from REDIS_USERNAME / REDIS_PASSWORD). */}}
{{- define "captcha-solver.redis.url" -}}
{{- $scheme := ternary "rediss" "redis" (eq (include "captcha-solver.redis.tls" .) "true") -}}
{{- printf "%s://%s:%s/%s" $scheme (include "captcha-solver.redis.host" .) (include "captcha-solver.redis.port" .) (include "captcha-solver.redis.db" .) -}}
{{- end -}}

{{/* Where Redis is, for people: the URL, or the sentinels and the master's name, or the cluster's seed. */}}
{{- define "captcha-solver.redis.display" -}}
{{- $mode := include "captcha-solver.redis.mode" . -}}
{{- if eq $mode "sentinel" -}}
{{- printf "master %q of the sentinels %s (REDIS_MODE=sentinel)" .Values.externalRedis.sentinel.masterName (include "captcha-solver.redis.sentinels" .) -}}
{{- else if eq $mode "cluster" -}}
{{- printf "cluster %s (REDIS_MODE=cluster)" (include "captcha-solver.redis.url" .) -}}
{{- else -}}
{{- include "captcha-solver.redis.url" . -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the Redis password ("" when Redis has no auth). */}}
{{- define "captcha-solver.redis.secretName" -}}
{{- if .Values.redis.enabled -}}
{{- default (include "captcha-solver.redis.fullname" .) .Values.redis.auth.existingSecret -}}
{{- else if .Values.externalRedis.existingSecret -}}
{{- .Values.externalRedis.existingSecret -}}
{{- else if or .Values.externalRedis.password .Values.externalRedis.username .Values.externalRedis.sentinel.password .Values.externalRedis.sentinel.username -}}
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
{{- else if and (not .Values.externalRedis.existingSecret) (or .Values.externalRedis.password .Values.externalRedis.username .Values.externalRedis.sentinel.password .Values.externalRedis.sentinel.username) -}}true
{{- end -}}
{{- end -}}

{{/* Whether the embedded Redis password is generated by the chart ("true" or ""). */}}
{{- define "captcha-solver.redis.generatedPassword" -}}
{{- if and .Values.redis.enabled (not .Values.redis.auth.password) (not .Values.redis.auth.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The password in the release's own Redis Secret as the cluster holds it now (lookup); "" when there is none or
     the chart is rendered without a cluster (`helm template`, `--dry-run=client`). */}}
{{- define "captcha-solver.redis.livePassword" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "captcha-solver.redis.fullname" .) -}}
{{- if and $existing (hasKey (default dict $existing.data) "redis-password") -}}
{{- index $existing.data "redis-password" | b64dec -}}
{{- end -}}
{{- end -}}

{{/*
Embedded Redis password: the explicit value, else the one already in the cluster (so upgrades keep it), else a new
random one (first install). Without a cluster to read it from a render cannot know it: `helm template` (Argo CD)
would generate a new one each time, so GitOps setups set redis.auth.password or redis.auth.existingSecret, and an
upgrade that cannot read the live Secret fails instead of rotating it (captcha-solver.validateValues).
*/}}
{{- define "captcha-solver.redis.password" -}}
{{- if .Values.redis.auth.password -}}
{{- .Values.redis.auth.password -}}
{{- else -}}
{{- default (randAlphaNum 32) (include "captcha-solver.redis.livePassword" .) -}}
{{- end -}}
{{- end -}}

{{/* Bytes of a redis.conf memory size ("200mb", "1gb", "500000k", "1048576"); "" when not understood. */}}
{{- define "captcha-solver.redis.sizeBytes" -}}
{{- $v := lower (toString .) -}}
{{- $units := dict "" 1 "b" 1 "k" 1000 "kb" 1024 "m" 1000000 "mb" 1048576 "g" 1000000000 "gb" 1073741824 -}}
{{- $number := regexFind "^[0-9]+" $v -}}
{{- $suffix := trimPrefix $number $v -}}
{{- if and $number (hasKey $units $suffix) -}}
{{- printf "%.0f" (mulf (float64 $number) (get $units $suffix)) -}}
{{- end -}}
{{- end -}}

{{/* Bytes of redis.resources.limits.memory ("" without a limit). */}}
{{- define "captcha-solver.redis.memoryLimitBytes" -}}
{{- include "captcha-solver.quantityBytes" (dig "limits" "memory" "" .Values.redis.resources) -}}
{{- end -}}

{{/* maxmemory: redis.maxmemory, else 75% of the container's memory limit (room for the AOF rewrite fork, buffers
     and fragmentation), so `noeviction` refuses writes before the kernel OOM-kills the pod. "" without either. */}}
{{- define "captcha-solver.redis.maxmemory" -}}
{{- if .Values.redis.maxmemory -}}
{{- .Values.redis.maxmemory -}}
{{- else -}}
{{- with include "captcha-solver.redis.memoryLimitBytes" . -}}{{ div (mul (int64 .) 3) 4 }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* redis.conf of the embedded Redis (the ConfigMap's only key; its checksum rolls the pod). */}}
{{- define "captcha-solver.redis.conf" -}}
port {{ .Values.redis.port }}
bind * -::*
protected-mode no
dir /data
# A queue must never lose keys to eviction: writes fail loudly instead.
maxmemory-policy noeviction
{{- with include "captcha-solver.redis.maxmemory" . }}
maxmemory {{ . }}
{{- end }}
{{- if .Values.redis.persistence.enabled }}
appendonly yes
appendfsync {{ .Values.redis.persistence.appendfsync }}
{{- else }}
appendonly no
save ""
{{- end }}
{{- with .Values.redis.extraConfig }}
{{ . }}
{{- end }}
{{- end -}}
