{{/* Names: <release>-dlaas unless the release name already says dlaas. */}}
{{- define "dlaas.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dlaas.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "api") */}}
{{- define "dlaas.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "dlaas.componentLabels" -}}
{{ include "dlaas.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference: (dict "ctx" $ "image" .Values.images.api) */}}
{{- define "dlaas.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The lifecycle manager's service account: the only one bound to a Role (learner pods). */}}
{{- define "dlaas.lifecycleServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-lifecycle-manager" (include "dlaas.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The API's service account: no rights in the cluster, and no token mounted. */}}
{{/* "true" when external S3 is reached through the cloud's workload identity (the
service-account annotations in s3.workloadIdentity), with no static keys; "" otherwise. */}}
{{- define "dlaas.s3WorkloadIdentity" -}}
{{- if .Values.s3.workloadIdentity -}}
{{- if .Values.s3.enabled -}}
{{- fail "s3.workloadIdentity is for an external S3 store (s3.enabled: false): the bundled server takes s3.accessKey and s3.secretKey" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{- define "dlaas.apiServiceAccountName" -}}
{{- printf "%s-api" (include "dlaas.fullname" .) -}}
{{- end -}}

{{- define "dlaas.secretName" -}}
{{- default (include "dlaas.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{- define "dlaas.learnersNamespace" -}}
{{- default .Release.Namespace .Values.learners.namespace -}}
{{- end -}}

{{/* What every control-plane container reads: the ConfigMap, the Secret, its pod's name. */}}
{{- define "dlaas.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "dlaas.fullname" . }}
  - secretRef:
      name: {{ include "dlaas.secretName" . }}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
{{- end -}}

{{/* The pod-level parts every control-plane pod shares: (dict "ctx" $ "serviceAccount" NAME
"token" BOOL), the token mounted only where the pod talks to the Kubernetes API. */}}
{{- define "dlaas.podSpec" -}}
{{- $ctx := .ctx -}}
serviceAccountName: {{ .serviceAccount }}
automountServiceAccountToken: {{ .token }}
{{- with $ctx }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.images.pullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir: {}
{{- end }}
{{- end -}}

{{- define "dlaas.volumeMounts" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{/*
Exec probes on the heartbeat file a lifecycle-manager process (beat, monitor, pod watcher)
refreshes from its working loop (lifecycle_manager/liveness.py): a process that died or
hangs stops refreshing it and is restarted. The startup probe covers the database migration
each runs before its loop.
*/}}
{{- define "dlaas.livenessFile" -}}/tmp/dlaas-alive{{- end -}}
{{- define "dlaas.heartbeatProbes" -}}
{{- $probe := list "python" "-m" "lifecycle_manager.liveness" (include "dlaas.livenessFile" .) "--max-age" (toString .Values.liveness.maxAgeSeconds) -}}
startupProbe:
  exec:
    command: {{ toJson $probe }}
  periodSeconds: 5
  timeoutSeconds: 10
  failureThreshold: 60
livenessProbe:
  exec:
    command: {{ toJson $probe }}
  periodSeconds: {{ .Values.liveness.periodSeconds }}
  timeoutSeconds: 10
  failureThreshold: 3
{{- end -}}

{{/*
A secret the chart is given, (dict "name" "adminToken" "value" .Values.adminToken): it must be
set, no well-known default, and at least 32 characters; one that goes into a URL ("inUrl")
holds only characters a URL keeps as they are. Else rendering fails, naming the value and
the fix. `dlaas secrets` (cli/secrets.py) applies the same rules to docker compose.
*/}}
{{- define "dlaas.knownDefaults" -}}
change-me-admin-token change-me-postgres change-me-s3-secret dlaas dlaas-secret e2e-admin-token admin changeme change-me password secret minioadmin
{{- end -}}
{{- define "dlaas.requireSecret" -}}
{{- $value := toString (default "" .value) -}}
{{- $fix := printf "set it with --set %s=$(openssl rand -hex 32), or set existingSecret to a Secret holding the credentials (see values.yaml)" .name -}}
{{- if not $value -}}
{{- fail (printf "%s is empty: the chart ships no default secret; %s" .name $fix) -}}
{{- else if has (lower $value) (splitList " " (include "dlaas.knownDefaults" .)) -}}
{{- fail (printf "%s is a well-known default; %s" .name $fix) -}}
{{- else if lt (len $value) 32 -}}
{{- fail (printf "%s is shorter than 32 characters; %s" .name $fix) -}}
{{- else if and .inUrl (not (regexMatch "^[A-Za-z0-9._~-]+$" $value)) -}}
{{- fail (printf "%s goes into a URL: use letters, digits and -._~ only; %s" .name $fix) -}}
{{- end -}}
{{- end -}}

{{- define "dlaas.postgresqlName" -}}{{ include "dlaas.fullname" . }}-postgresql{{- end -}}
{{- define "dlaas.redisName" -}}{{ include "dlaas.fullname" . }}-redis{{- end -}}
{{- define "dlaas.s3Name" -}}{{ include "dlaas.fullname" . }}-s3{{- end -}}

{{/* Bundled services by their namespaced names: learners may run in another namespace. */}}
{{- define "dlaas.databaseUrl" -}}
{{- if .Values.postgresql.enabled -}}
{{- printf "postgresql+asyncpg://%s:%s@%s.%s.svc:5432/%s" .Values.postgresql.user .Values.postgresql.password (include "dlaas.postgresqlName" .) .Release.Namespace .Values.postgresql.database -}}
{{- else -}}
{{- required "postgresql.externalUrl is required when postgresql.enabled is false" .Values.postgresql.externalUrl -}}
{{- end -}}
{{- end -}}

{{- define "dlaas.redisUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://:%s@%s.%s.svc:6379/0" (toString .Values.redis.password) (include "dlaas.redisName" .) .Release.Namespace -}}
{{- else -}}
{{- required "redis.externalUrl is required when redis.enabled is false" .Values.redis.externalUrl -}}
{{- end -}}
{{- end -}}

{{- define "dlaas.s3Endpoint" -}}
{{- if .Values.s3.enabled -}}
{{- printf "http://%s.%s.svc:8333" (include "dlaas.s3Name" .) .Release.Namespace -}}
{{- else -}}
{{- required "s3.endpoint is required when s3.enabled is false" .Values.s3.endpoint -}}
{{- end -}}
{{- end -}}

{{/* The annotations of the shutdown hook's objects, given their weight: made when
`helm uninstall` begins, deleted once it ran (a failed Job stays for its log until the next). */}}
{{- define "dlaas.shutdownHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
