{{/* vim: set filetype=mustache: */}}
{{/* Validation (bitnami style): every check appends its message, the chart fails once with all of them. */}}

{{- define "captcha-solver.validateValues" -}}
{{- $msgs := list -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.budget" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.termination" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.credentials" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.redis" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.disruption" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.gateway" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.pingback" . | fromJsonArray) -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.providers" . | fromJsonArray) -}}
{{- if $msgs -}}
{{- fail (printf "\n\nVALUES VALIDATION:\n  - %s\n" (join "\n  - " $msgs)) -}}
{{- end -}}
{{- end -}}

{{/* The plan's threads bound concurrency, replicas and KEDA's bounds. */}}
{{- define "captcha-solver.validate.budget" -}}
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
{{- toJson $msgs -}}
{{- end -}}

{{/* No SIGKILL mid-solve: terminationGracePeriodSeconds > preStop + drainGraceSeconds >= solveTimeoutSeconds. */}}
{{- define "captcha-solver.validate.termination" -}}
{{- $msgs := list -}}
{{- $drain := int .Values.worker.drainGraceSeconds -}}
{{- if lt $drain (int .Values.worker.solveTimeoutSeconds) -}}
{{- $msgs = append $msgs (printf "worker.drainGraceSeconds (%d) is shorter than worker.solveTimeoutSeconds (%d): a draining pod could not finish its longest solve." $drain (int .Values.worker.solveTimeoutSeconds)) -}}
{{- end -}}
{{- $grace := include "captcha-solver.terminationGracePeriodSeconds" . | int -}}
{{- $pre := include "captcha-solver.worker.preStopSeconds" . | int -}}
{{- if le $grace (add $pre $drain) -}}
{{- if $pre -}}
{{- $msgs = append $msgs (printf "worker.terminationGracePeriodSeconds (%d) must be greater than the preStop hook of worker.lifecycle (%ds) + worker.drainGraceSeconds (%d) = %d: the kubelet counts the hook in the grace period and sends SIGTERM only after it, so the drain would be cut short by SIGKILL." $grace $pre $drain (add $pre $drain)) -}}
{{- else -}}
{{- $msgs = append $msgs (printf "worker.terminationGracePeriodSeconds (%d) must be greater than worker.drainGraceSeconds (%d), or Kubernetes kills the worker before its drain ends." $grace $drain) -}}
{{- end -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{/* The API key must come from somewhere: a Secret with an empty key only makes every worker exit. */}}
{{- define "captcha-solver.validate.credentials" -}}
{{- $msgs := list -}}
{{- if and .Values.captchaai.apiKey .Values.captchaai.existingSecret -}}
{{- $msgs = append $msgs "Set captchaai.apiKey or captchaai.existingSecret, not both." -}}
{{- end -}}
{{- if and (not .Values.captchaai.apiKey) (not .Values.captchaai.existingSecret) -}}
{{- $msgs = append $msgs "No CaptchaAI API key: set captchaai.existingSecret=<Secret holding the key under captchaai.existingSecretKey> (recommended) or captchaai.apiKey. The workers cannot start without one." -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{- define "captcha-solver.validate.redis" -}}
{{- $msgs := list -}}
{{- if and .Values.redis.enabled .Values.externalRedis.host -}}
{{- $msgs = append $msgs "Both redis.enabled=true and externalRedis.host are set: choose one (set redis.enabled=false to use the external Redis)." -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.host) (ne .Values.externalRedis.mode "sentinel") -}}
{{- $msgs = append $msgs "No Redis configured: set redis.enabled=true (embedded) or externalRedis.host (or externalRedis.mode=sentinel with externalRedis.sentinel.hosts)." -}}
{{- end -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.redisMode" . | fromJsonArray) -}}
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
{{- if .Values.redis.enabled -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.embeddedRedis" . | fromJsonArray) -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{/* externalRedis.mode and the values that belong to one mode only. */}}
{{- define "captcha-solver.validate.redisMode" -}}
{{- $msgs := list -}}
{{- $e := .Values.externalRedis -}}
{{- $sentinelSet := or $e.sentinel.hosts $e.sentinel.password $e.sentinel.username $e.sentinel.existingSecretPasswordKey $e.sentinel.existingSecretUsernameKey -}}
{{- if and .Values.redis.enabled (or (ne $e.mode "standalone") $e.waitReplicas) -}}
{{- $msgs = append $msgs "externalRedis.mode and externalRedis.waitReplicas apply to an external Redis: the embedded one is a single server (set redis.enabled=false to use yours)." -}}
{{- end -}}
{{- if and (ne $e.mode "sentinel") $sentinelSet -}}
{{- $msgs = append $msgs (printf "externalRedis.sentinel.* is set but externalRedis.mode is %s: set externalRedis.mode=sentinel to use the sentinels." $e.mode) -}}
{{- end -}}
{{- if and (ne $e.mode "cluster") $e.cluster.nodes -}}
{{- $msgs = append $msgs (printf "externalRedis.cluster.nodes is set but externalRedis.mode is %s: set externalRedis.mode=cluster." $e.mode) -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (eq $e.mode "sentinel") -}}
{{- if $e.host -}}
{{- $msgs = append $msgs "externalRedis.host is not used with externalRedis.mode=sentinel: the sentinels name the master. List them in externalRedis.sentinel.hosts and leave externalRedis.host empty." -}}
{{- else if not $e.sentinel.hosts -}}
{{- $msgs = append $msgs "externalRedis.mode=sentinel needs externalRedis.sentinel.hosts (the sentinels as host:port)." -}}
{{- end -}}
{{- if and $e.existingSecret (or $e.sentinel.password $e.sentinel.username) -}}
{{- $msgs = append $msgs "externalRedis.sentinel.password/username are ignored with externalRedis.existingSecret: put them in that Secret and set externalRedis.sentinel.existingSecretPasswordKey/existingSecretUsernameKey." -}}
{{- end -}}
{{- if and (not $e.existingSecret) (or $e.sentinel.existingSecretPasswordKey $e.sentinel.existingSecretUsernameKey) -}}
{{- $msgs = append $msgs "externalRedis.sentinel.existingSecretPasswordKey/existingSecretUsernameKey name keys of externalRedis.existingSecret, which is not set." -}}
{{- end -}}
{{- if and $e.sentinel.username (not $e.sentinel.password) -}}
{{- $msgs = append $msgs "externalRedis.sentinel.username is set without externalRedis.sentinel.password." -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (eq $e.mode "cluster") (ne (int $e.db) 0) -}}
{{- $msgs = append $msgs (printf "externalRedis.db is %d but a Redis Cluster has only database 0 (externalRedis.mode=cluster): use queue.name to separate deployments." (int $e.db)) -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{/* The embedded Redis: memory bound, a password an upgrade can keep, and the StatefulSet's immutable fields. */}}
{{- define "captcha-solver.validate.embeddedRedis" -}}
{{- $msgs := list -}}
{{- $limit := include "captcha-solver.redis.memoryLimitBytes" . -}}
{{- $limitText := toString (dig "limits" "memory" "" .Values.redis.resources) -}}
{{- if and $limitText (not $limit) (not .Values.redis.maxmemory) -}}
{{- $msgs = append $msgs (printf "redis.resources.limits.memory (%s) is not a quantity the chart can read (e.g. 256Mi, 1Gi): set redis.maxmemory explicitly." $limitText) -}}
{{- end -}}
{{- if and .Values.redis.maxmemory $limit -}}
{{- $max := include "captcha-solver.redis.sizeBytes" .Values.redis.maxmemory -}}
{{- if and $max (ge (int64 $max) (int64 $limit)) -}}
{{- $msgs = append $msgs (printf "redis.maxmemory (%s) must be below redis.resources.limits.memory (%s): the kernel would OOM-kill Redis before maxmemory-policy noeviction applies. Leave redis.maxmemory empty for 75%% of the limit." .Values.redis.maxmemory $limitText) -}}
{{- end -}}
{{- end -}}
{{- if and .Release.IsUpgrade (include "captcha-solver.redis.generatedPassword" .) (not (include "captcha-solver.redis.livePassword" .)) -}}
{{- $msgs = append $msgs (printf "Cannot read the embedded Redis password generated at install (Secret %s/%s): this upgrade would replace it with a new random one while Redis keeps the old. Render with cluster access (no --dry-run=client; --dry-run=server works), or set redis.auth.password to the current password (kubectl -n %s get secret %s -o jsonpath='{.data.redis-password}' | base64 -d), or use redis.auth.existingSecret." .Release.Namespace (include "captcha-solver.redis.fullname" .) .Release.Namespace (include "captcha-solver.redis.fullname" .)) -}}
{{- end -}}
{{- $msgs = concat $msgs (include "captcha-solver.validate.redisStatefulSet" . | fromJsonArray) -}}
{{- toJson $msgs -}}
{{- end -}}

{{/* A StatefulSet's serviceName and volumeClaimTemplates cannot change: compare with the live one (lookup) and say
     how to migrate, instead of the API server's "updates to statefulset spec ... are forbidden". */}}
{{- define "captcha-solver.validate.redisStatefulSet" -}}
{{- $msgs := list -}}
{{- $name := include "captcha-solver.redis.fullname" . -}}
{{- $live := lookup "apps/v1" "StatefulSet" .Release.Namespace $name -}}
{{- if $live -}}
{{- $how := printf "StatefulSet fields that cannot change on upgrade. Recreate the StatefulSet and keep its pod and data: kubectl -n %s delete statefulset %s --cascade=orphan, then helm upgrade (see the chart README, \"Redis\")." .Release.Namespace $name -}}
{{- if ne (toString $live.spec.serviceName) (include "captcha-solver.redis.headlessName" .) -}}
{{- $msgs = append $msgs (printf "The Redis StatefulSet %s uses serviceName %s; this chart version gives it the headless Service %s. serviceName is one of the %s" $name (toString $live.spec.serviceName) (include "captcha-solver.redis.headlessName" .) $how) -}}
{{- end -}}
{{- $claims := default list $live.spec.volumeClaimTemplates -}}
{{- if ne (gt (len $claims) 0) .Values.redis.persistence.enabled -}}
{{- $msgs = append $msgs (printf "redis.persistence.enabled changed to %t, but the volumeClaimTemplates of the Redis StatefulSet %s are one of the %s Switching persistence off drops the data on the PVC; switching it on starts empty." .Values.redis.persistence.enabled $name $how) -}}
{{- else if $claims -}}
{{- $spec := (index $claims 0).spec -}}
{{- $size := toString (dig "resources" "requests" "storage" "" $spec) -}}
{{- if ne $size (toString .Values.redis.persistence.size) -}}
{{- $msgs = append $msgs (printf "redis.persistence.size changed from %s to %s, but volumeClaimTemplates are one of the %s To grow the volume of a running release, resize its PVC (data-%s-0) if the StorageClass allows expansion, then set redis.persistence.size to match." $size (toString .Values.redis.persistence.size) $how $name) -}}
{{- end -}}
{{- $class := toString (default "" $spec.storageClassName) -}}
{{- if and .Values.redis.persistence.storageClass (ne $class .Values.redis.persistence.storageClass) -}}
{{- $msgs = append $msgs (printf "redis.persistence.storageClass changed from %q to %q, but volumeClaimTemplates are one of the %s" $class .Values.redis.persistence.storageClass $how) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{- define "captcha-solver.validate.disruption" -}}
{{- $msgs := list -}}
{{- $min := include "captcha-solver.minReplicas" . | int -}}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (gt $min 1) -}}
{{- if ge (int .Values.podDisruptionBudget.minAvailable) $min -}}
{{- $msgs = append $msgs (printf "podDisruptionBudget.minAvailable (%d) must be lower than the minimum replicas (%d), or no node could ever be drained." (int .Values.podDisruptionBudget.minAvailable) $min) -}}
{{- end -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{/* The gateway's values checks, as a JSON list of messages (captcha-solver.validateValues fails once with all). */}}
{{- define "captcha-solver.validate.gateway" -}}
{{- $g := .Values.gateway -}}
{{- $msgs := list -}}
{{- if $g.enabled -}}
{{- if not $g.tenants -}}
{{- $msgs = append $msgs "gateway.tenants: at least one tenant is needed (name and threads)" -}}
{{- end -}}
{{- $names := list -}}
{{- $reserved := 0 -}}
{{- range $g.tenants -}}
{{- if has .name $names -}}
{{- $msgs = append $msgs (printf "gateway.tenants: %s is listed twice" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- if gt (int (.reserved | default 0)) (int .threads) -}}
{{- $msgs = append $msgs (printf "gateway.tenants: %s reserves %d threads, more than its %d" .name (int .reserved) (int .threads)) -}}
{{- end -}}
{{- $reserved = add $reserved (int (.reserved | default 0)) -}}
{{- end -}}
{{- if gt (int $reserved) (int $.Values.captchaai.threads) -}}
{{- $msgs = append $msgs (printf "gateway.tenants: reserved threads add up to %d, more than captchaai.threads (%d)" (int $reserved) (int $.Values.captchaai.threads)) -}}
{{- end -}}
{{- if and $g.autoscaling.enabled (lt (int $g.autoscaling.maxReplicas) (int $g.autoscaling.minReplicas)) -}}
{{- $msgs = append $msgs "gateway.autoscaling: maxReplicas is below minReplicas" -}}
{{- end -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}

{{/* Pingback mode needs the receiver's external URL. */}}
{{- define "captcha-solver.validate.pingback" -}}
{{- $msgs := list -}}
{{- if and .Values.pingback.enabled (not .Values.pingback.url) -}}
{{- $msgs = append $msgs "pingback.enabled needs pingback.url: the receiver's base URL as CaptchaAI reaches it (e.g. https://captcha-pingback.example.com, the host of pingback.ingress)." -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}
