{{/* vim: set filetype=mustache: */}}
{{/* Per-solve overflow providers (`providers`, `spendCap`; docs/operations.md "Cost and overflow"): PROVIDERS in the
     worker ConfigMap (no key: each provider's key is a file of its mounted Secret, `key_file`), the Secrets'
     volumes, and the checks the schema cannot express (validate.providers). */}}

{{/* Where provider <name>'s Secret is mounted (a directory: a subPath mount would never see an update). */}}
{{- define "captcha-solver.providers.dir" -}}/etc/captcha-solver/providers{{- end -}}

{{/* PROVIDERS as the worker reads it (config.providers_from_env); empty without providers. */}}
{{- define "captcha-solver.providers.json" -}}
{{- if .Values.providers -}}
{{- $dir := include "captcha-solver.providers.dir" . -}}
{{- $list := list -}}
{{- range .Values.providers -}}
{{- $p := dict "name" .name "protocol" .protocol "url" (trimSuffix "/" .url) "kinds" .kinds "price_per_1000" .pricePer1000
  "key_file" (printf "%s/%s/%s" $dir .name (.existingSecretKey | default "api-key"))
  "concurrency" (int (.concurrency | default 10)) -}}
{{- if not (kindIs "invalid" .refundUnsolvable) -}}{{- $_ := set $p "refund_unsolvable" .refundUnsolvable -}}{{- end -}}
{{- if .dialect -}}{{- $_ := set $p "dialect" .dialect -}}{{- end -}}
{{- $list = append $list $p -}}
{{- end -}}
{{- $doc := dict "providers" $list "cap" (dict "hour" .Values.spendCap.hour "day" .Values.spendCap.day) -}}
{{- if not .Values.overflowOnDeadline -}}{{- $_ := set $doc "on_deadline" false -}}{{- end -}}
{{- $doc | toJson -}}
{{- end -}}
{{- end -}}

{{/* One volume per provider: its Secret's key file, 0444 like the CaptchaAI key (no reliance on fsGroup). */}}
{{- define "captcha-solver.providers.volumes" -}}
{{- range .Values.providers }}
- name: provider-{{ .name }}
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0444
    items:
      - key: {{ .existingSecretKey | default "api-key" }}
        path: {{ .existingSecretKey | default "api-key" }}
{{- end }}
{{- end -}}

{{- define "captcha-solver.providers.volumeMounts" -}}
{{- $dir := include "captcha-solver.providers.dir" . -}}
{{- range .Values.providers }}
- name: provider-{{ .name }}
  mountPath: {{ $dir }}/{{ .name }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The providers' API ports (from their URLs: the port, or 443/80 by scheme), for the egress NetworkPolicy. */}}
{{- define "captcha-solver.providers.ports" -}}
{{- $ports := list -}}
{{- range .Values.providers -}}
{{- $u := urlParse .url -}}
{{- $hostPort := splitList ":" $u.host -}}
{{- $port := ternary 80 443 (eq $u.scheme "http") -}}
{{- if eq (len $hostPort) 2 }}{{- $port = index $hostPort 1 | int -}}{{- end -}}
{{- $ports = append $ports (int $port) -}}
{{- end -}}
{{- $ports | uniq | toJson -}}
{{- end -}}

{{/* What the schema cannot say: unique names, a price for exactly the kinds, the cap given. */}}
{{- define "captcha-solver.validate.providers" -}}
{{- $msgs := list -}}
{{- if .Values.providers -}}
{{- if or (kindIs "invalid" .Values.spendCap.hour) (kindIs "invalid" .Values.spendCap.day) -}}
{{- $msgs = append $msgs "providers need spendCap.hour and spendCap.day (money per clock hour and per UTC day; 0 spends nothing): the cap is never implicit." -}}
{{- end -}}
{{- $names := list -}}
{{- range $i, $p := .Values.providers -}}
{{- if has $p.name $names -}}
{{- $msgs = append $msgs (printf "providers[%d]: the name %q is used twice." $i $p.name) -}}
{{- end -}}
{{- $names = append $names $p.name -}}
{{- if and $p.dialect (ne $p.dialect "standard") (ne $p.protocol "createTask") -}}
{{- $msgs = append $msgs (printf "providers[%d] (%s): dialect %q is for a createTask provider." $i $p.name $p.dialect) -}}
{{- end -}}
{{- $priced := keys $p.pricePer1000 | sortAlpha -}}
{{- if ne (toJson $priced) (toJson ($p.kinds | sortAlpha)) -}}
{{- $msgs = append $msgs (printf "providers[%d] (%s): pricePer1000 must give a price for exactly its kinds (%s), got %s." $i $p.name (join ", " $p.kinds) (join ", " $priced)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $msgs -}}
{{- end -}}
