{{/* vim: set filetype=mustache: */}}
{{/* The thread budget, the replica bounds it gives, and how the ScaledObject measures demand. */}}

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

{{/* The most worker pods that may run at once: KEDA max, or fixed replicas. */}}
{{- define "captcha-solver.maxReplicas" -}}
{{- if .Values.keda.enabled -}}{{ include "captcha-solver.maxReplicaCount" . }}{{- else -}}{{ int .Values.worker.replicas }}{{- end -}}
{{- end -}}

{{/*
The worker Deployment's spec.replicas while KEDA scales it: "" (the field left out) or the live count read back.
Left out on a first install and in `helm template` (nothing live), and once the HPA/KEDA own the field: under server-
side apply (Helm 4) the live object's managedFields say who owns spec.replicas; when no Apply manager (Helm) owns
it, it was last written by the HPA or KEDA (an Update of the scale subresource), and an apply that named it would
conflict with them (it did in e2e-pods, ssa_replicas_conflicts: 1) -- leaving it out changes nothing. The live count is
rendered (1) on the switch keda.enabled false -> true under server-side apply, while Helm still owns the field it set
as worker.replicas: leaving it out would reset the Deployment to the default 1; the HPA's first write takes it over;
(2) under Helm 3's client-side three-way merge (no Apply manager): a field dropped from the previous manifest is
deleted (reset to 1), and a merge patch cannot conflict, so the chart keeps writing the count it read.
*/}}
{{- define "captcha-solver.worker.liveReplicas" -}}
{{- $live := lookup "apps/v1" "Deployment" .Release.Namespace (include "captcha-solver.worker.fullname" .) -}}
{{- if and $live (hasKey (default dict $live.spec) "replicas") -}}
{{- $applied := false -}}
{{- $ownsReplicas := false -}}
{{- range (default list (default dict $live.metadata).managedFields) -}}
{{- if eq (toString .operation) "Apply" -}}
{{- $applied = true -}}
{{- $spec := get (default dict .fieldsV1) "f:spec" -}}
{{- if and (kindIs "map" $spec) (hasKey $spec "f:replicas") -}}{{- $ownsReplicas = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if or (not $applied) $ownsReplicas -}}{{- int $live.spec.replicas -}}{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The lists KEDA watches, as JSON: name (the formula's variable), list (the Redis key), activation. pending and the
seed guide's list (compat.queueList) and, with the gateway, each tenant's waiting list ({q}:waiting:<tenant>, where
the workers' claim sorts a tenant's tasks: docs/gateway.md#shares) wake pods from zero past activationListLength;
processing keeps them while anything is in flight.
*/}}
{{- define "captcha-solver.keda.lists" -}}
{{- $so := .Values.keda.scaledObject -}}
{{- $q := .Values.queue.name -}}
{{- $lists := list (dict "name" "pending" "list" (printf "{%s}:pending" $q) "activation" (int $so.activationListLength)) -}}
{{- if $so.processingTrigger }}{{- $lists = append $lists (dict "name" "processing" "list" (printf "{%s}:processing" $q) "activation" 0) }}{{- end -}}
{{- with .Values.compat.queueList }}{{- $lists = append $lists (dict "name" "compat" "list" . "activation" (int $so.activationListLength)) }}{{- end -}}
{{- if .Values.gateway.enabled -}}
{{- range .Values.gateway.tenants -}}
{{- $lists = append $lists (dict "name" (printf "waiting_%s" (.name | replace "-" "_")) "list" (printf "{%s}:waiting:%s" $q .name) "activation" (int $so.activationListLength)) -}}
{{- end -}}
{{- end -}}
{{- toJson $lists -}}
{{- end -}}

{{/*
One demand metric for the HPA: the lists' sum (pending + processing [+ compat]), in slots (target = worker.concurrency per replica). Two
triggers would each give the HPA a replica count and the HPA takes the larger, not the sum: 2 full pods plus 9
pending stayed at 2. The formula is 0 below the activation (nothing in flight and at most activationListLength
pending), so KEDA scales to zero exactly as a single pending trigger with that activation would.
*/}}
{{- define "captcha-solver.keda.formula" -}}
{{- $lists := include "captcha-solver.keda.lists" . | fromJsonArray -}}
{{- $conds := list -}}
{{- $names := list -}}
{{- range $lists -}}
{{- $conds = append $conds (printf "%s > %d" .name (int .activation)) -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- printf "%s ? %s : 0" (join " || " $conds) (join " + " $names) -}}
{{- end -}}

{{/* The KEDA scaler for the Redis deployment: redis, redis-sentinel or redis-cluster. */}}
{{- define "captcha-solver.keda.triggerType" -}}
{{- $mode := include "captcha-solver.redis.mode" . -}}
{{- if eq $mode "standalone" -}}redis{{- else -}}redis-{{ $mode }}{{- end -}}
{{- end -}}

{{/* Where the scaler finds the list, as trigger metadata: the server (standalone), the sentinels and the master's
     name, or the cluster's seed nodes (a cluster has no databaseIndex). */}}
{{- define "captcha-solver.keda.where" -}}
{{- $mode := include "captcha-solver.redis.mode" . -}}
{{- ternary "address" "addresses" (eq $mode "standalone") }}: {{ include "captcha-solver.redis.addresses" . | quote }}
{{- if eq $mode "sentinel" }}
sentinelMaster: {{ .Values.externalRedis.sentinel.masterName | quote }}
{{- end }}
{{- if ne $mode "cluster" }}
databaseIndex: {{ include "captcha-solver.redis.db" . | quote }}
{{- end }}
{{- end -}}
