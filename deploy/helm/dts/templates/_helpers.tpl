{{/*
Names: RELEASE-dts unless overridden, cut to 63 characters (a DNS label).
*/}}
{{- define "dts.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dts.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Selector labels of one component: (dict "ctx" $ "component" "submitter").
*/}}
{{- define "dts.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dts.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "dts.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dts.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{/*
An image reference: (dict "ctx" $ "image" .Values.submitter.image).
*/}}
{{- define "dts.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .ctx.Chart.AppVersion) }}
{{- end }}

{{/*
The chart's own Secret, holding whatever values were given inline.
*/}}
{{- define "dts.secretName" -}}
{{- include "dts.fullname" . }}
{{- end }}

{{/*
Whether the API has tokens (AUTH_API_KEYS, a JWT secret or a public key).
*/}}
{{- define "dts.authEnabled" -}}
{{- $a := .Values.auth }}
{{- if or $a.apiKeys $a.jwtSecret $a.existingSecret $a.jwtPublicKey }}true{{ end }}
{{- end }}

{{/*
Checks of values that would otherwise give pods that refuse to start or
workers the coordinators refuse.
*/}}
{{- define "dts.validate" -}}
{{- if and (not (include "dts.authEnabled" .)) (not .Values.auth.insecureNoAuth) }}
{{- fail "auth: pods listen on 0.0.0.0, so set auth.apiKeys, auth.jwtSecret, auth.existingSecret or auth.jwtPublicKey, or auth.insecureNoAuth=true" }}
{{- end }}
{{- if and (not .Values.postgresql.url) (not .Values.postgresql.existingSecret) }}
{{- fail "postgresql: set postgresql.url or postgresql.existingSecret" }}
{{- end }}
{{- if and (not .Values.redis.url) (not .Values.redis.existingSecret) }}
{{- fail "redis: set redis.url or redis.existingSecret" }}
{{- end }}
{{- if .Values.redis.sentinel.enabled }}
{{- if or (not .Values.redis.sentinel.addrs) (not .Values.redis.sentinel.master) }}
{{- fail "redis.sentinel: enabled needs addrs and master" }}
{{- end }}
{{- range .Values.redis.sentinel.addrs }}
{{- if not (regexMatch "^[^:]+:[0-9]+$" .) }}
{{- fail (printf "redis.sentinel.addrs: %q is not host:port" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Redis settings, the same in every process.
*/}}
{{- define "dts.redisEnv" -}}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret | default (include "dts.secretName" .) }}
      key: {{ if .Values.redis.existingSecret }}{{ .Values.redis.existingSecretKey }}{{ else }}"redis-url"{{ end }}
{{- with .Values.redis.prefix }}
- name: REDIS_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- with .Values.redis.sentinel }}
{{- if .enabled }}
- name: REDIS_SENTINEL_ADDRS
  value: {{ join "," .addrs | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ .master | quote }}
{{- if or .password .existingSecret }}
- name: REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret | default (include "dts.secretName" $) }}
      key: {{ if .existingSecret }}{{ .existingSecretKey }}{{ else }}"redis-sentinel-password"{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dts.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.postgresql.existingSecret | default (include "dts.secretName" .) }}
      key: {{ if .Values.postgresql.existingSecret }}{{ .Values.postgresql.existingSecretKey }}{{ else }}"database-url"{{ end }}
{{- end }}

{{/*
Authentication settings of the submitter and the coordinators.
*/}}
{{- define "dts.authEnv" -}}
{{- with .Values.auth }}
{{- if .apiKeys }}
- name: AUTH_API_KEYS
  value: "true"
{{- end }}
{{- if or .jwtSecret .existingSecret }}
- name: AUTH_JWT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret | default (include "dts.secretName" $) }}
      key: {{ if .existingSecret }}{{ .existingSecretKey }}{{ else }}"auth-jwt-secret"{{ end }}
{{- end }}
{{- if .jwtPublicKey }}
- name: AUTH_JWT_PUBLIC_KEY_FILE
  value: /etc/dts/jwt/public.pem
{{- end }}
{{- with .jwtIssuer }}
- name: AUTH_JWT_ISSUER
  value: {{ . | quote }}
{{- end }}
{{- with .jwtAudience }}
- name: AUTH_JWT_AUDIENCE
  value: {{ . | quote }}
{{- end }}
{{- if .insecureNoAuth }}
- name: INSECURE_NO_AUTH
  value: "true"
{{- end }}
{{- end }}
{{- end }}

{{/*
The volume and mount of the JWT public key, when there is one.
*/}}
{{- define "dts.jwtVolume" -}}
{{- if .Values.auth.jwtPublicKey }}
- name: jwt-public-key
  configMap:
    name: {{ include "dts.fullname" . }}-jwt
{{- end }}
{{- end }}

{{- define "dts.jwtVolumeMount" -}}
{{- if .Values.auth.jwtPublicKey }}
- name: jwt-public-key
  mountPath: /etc/dts/jwt
  readOnly: true
{{- end }}
{{- end }}

{{/*
A component's extra settings, sorted: (dict "env" .Values.submitter.env
"reserved" (list "NAME" ...)). A name the chart sets itself fails: two
entries of one name would leave which one wins to the kubelet.
*/}}
{{- define "dts.extraEnv" -}}
{{- range $name := keys .env | sortAlpha }}
{{- if has $name $.reserved }}
{{- fail (printf "env %s is set by the chart from its values; set those instead" $name) }}
{{- end }}
- name: {{ $name }}
  value: {{ get $.env $name | toString | quote }}
{{- end }}
{{- end }}

{{/*
The settings every process shares and the chart sets.
*/}}
{{- define "dts.reservedEnv" -}}
{{- list "LOG_LEVEL" "REDIS_URL" "REDIS_PREFIX" "REDIS_SENTINEL_ADDRS" "REDIS_SENTINEL_MASTER" "REDIS_SENTINEL_PASSWORD" | toJson }}
{{- end }}

{{- define "dts.reservedAuthEnv" -}}
{{- list "DATABASE_URL" "AUTH_API_KEYS" "AUTH_JWT_SECRET" "AUTH_JWT_SECRET_FILE" "AUTH_JWT_PUBLIC_KEY_FILE" "AUTH_JWT_ISSUER" "AUTH_JWT_AUDIENCE" "INSECURE_NO_AUTH" | toJson }}
{{- end }}

{{/*
The container security settings of every component: the images run as uid
10001 and write nothing.
*/}}
{{- define "dts.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: [ALL]
{{- end }}
