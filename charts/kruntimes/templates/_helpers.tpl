{{/*
The names are fixed, as in artifacts/deploy: the APIService, the ClusterRoles
and the ValidatingAdmissionPolicy are cluster-wide, so a cluster holds one
kruntimes installation, and kruntimes-apiserver's default serving name
(kruntimes-apiserver.kruntimes-system.svc) and its controllers' leader Lease
(kruntimes-system/kruntimes-controllers) are fixed in the binary.
*/}}
{{- define "kruntimes.namespace" -}}kruntimes-system{{- end }}
{{- define "kruntimes.apiserverName" -}}kruntimes-apiserver{{- end }}
{{- define "kruntimes.servingSecretName" -}}
{{- if eq .Values.tls.type "secret" }}{{ .Values.tls.secret.name }}{{ else }}kruntimes-apiserver-serving{{ end }}
{{- end }}

{{/* Selector labels: as artifacts/deploy's, so that they never change. */}}
{{- define "kruntimes.selectorLabels" -}}
app.kubernetes.io/name: kruntimes-apiserver
{{- end }}
{{- define "kruntimes.controllersName" -}}kruntimes-controllers{{- end }}
{{- define "kruntimes.controllersSelectorLabels" -}}
app.kubernetes.io/name: kruntimes-controllers
{{- end }}

{{/* The ServiceAccount the controllers run as: their own, or the apiserver's
when it hosts them (controllers.hosted). */}}
{{- define "kruntimes.controllersServiceAccount" -}}
{{- if .Values.controllers.hosted }}{{ include "kruntimes.apiserverName" . }}{{ else }}{{ include "kruntimes.controllersName" . }}{{ end }}
{{- end }}

{{/* Labels of every object the chart renders. */}}
{{- define "kruntimes.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: kruntimes
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* image renders registry/repository:tag of one component's image values.
An empty tag is the chart's appVersion, followed by defaultTagSuffix when
given (the runtime image: its plain variant has no interpreter). */}}
{{- define "kruntimes.image" -}}
{{- $image := index .root.Values.image .component -}}
{{- $tag := default (printf "%s%s" .root.Chart.AppVersion (.defaultTagSuffix | default "")) $image.tag -}}
{{- if $image.registry }}{{ printf "%s/%s:%s" $image.registry $image.repository $tag }}{{ else }}{{ printf "%s:%s" $image.repository $tag }}{{ end }}
{{- end }}

{{/* The runtimed CA's source: runtimedCA.type, or tls.type when empty. */}}
{{- define "kruntimes.runtimedCAType" -}}
{{- default .Values.tls.type .Values.runtimedCA.type }}
{{- end }}
{{- define "kruntimes.runtimedCASecretName" -}}
{{- if eq (include "kruntimes.runtimedCAType" .) "secret" }}{{ .Values.runtimedCA.secret.caName }}{{ else }}kruntimes-runtimed-ca{{ end }}
{{- end }}
{{- define "kruntimes.runtimedClientSecretName" -}}
{{- if eq (include "kruntimes.runtimedCAType" .) "secret" }}{{ .Values.runtimedCA.secret.clientName }}{{ else }}kruntimes-apiserver-runtimed-client{{ end }}
{{- end }}
{{/* The scraper's client pair for runtimed's /metrics (CommonName kruntimes-metrics). */}}
{{- define "kruntimes.runtimedMetricsClientSecretName" -}}
{{- if eq (include "kruntimes.runtimedCAType" .) "secret" }}{{ .Values.runtimedCA.secret.metricsClientName }}{{ else }}kruntimes-runtimed-metrics-client{{ end }}
{{- end }}

{{/*
validate refuses values that contradict each other or cannot work, so that a
wrong values file fails at helm template/install rather than in the cluster.
*/}}
{{- define "kruntimes.validate" -}}
{{- if ne .Release.Namespace (include "kruntimes.namespace" .) }}
{{- fail (printf "install kruntimes into the namespace kruntimes-system (helm install --namespace kruntimes-system --create-namespace), not %q: kruntimes-apiserver's serving name and its controllers' leader Lease are in kruntimes-system" .Release.Namespace) }}
{{- end }}
{{- if not (has .Values.tls.type (list "helm" "secret" "cert-manager")) }}
{{- fail (printf "tls.type must be helm, secret or cert-manager, not %q" .Values.tls.type) }}
{{- end }}
{{- if not (has (include "kruntimes.runtimedCAType" .) (list "helm" "secret" "cert-manager" "none")) }}
{{- fail (printf "runtimedCA.type must be helm, secret, cert-manager, none or empty (as tls.type), not %q" .Values.runtimedCA.type) }}
{{- end }}
{{- if eq .Values.storage.backend "embedded" }}
{{- if gt (int .Values.replicas) 1 }}
{{- fail (printf "storage.backend=embedded runs one replica (its data file has one writer), but replicas is %d: set replicas: 1, or storage.backend: etcd3 with storage.etcd3.servers" (int .Values.replicas)) }}
{{- end }}
{{- else if eq .Values.storage.backend "etcd3" }}
{{- if not .Values.storage.etcd3.servers }}
{{- fail "storage.backend=etcd3 needs storage.etcd3.servers (the etcd client URLs)" }}
{{- end }}
{{- else }}
{{- fail (printf "storage.backend must be embedded or etcd3, not %q" .Values.storage.backend) }}
{{- end }}
{{- if not (has .Values.invokeEndpoint (list "aggregated" "direct")) }}
{{- fail (printf "invokeEndpoint must be aggregated or direct, not %q" .Values.invokeEndpoint) }}
{{- end }}
{{- if not (has .Values.runtimedAPI (list "aggregated" "direct")) }}
{{- fail (printf "runtimedAPI must be aggregated or direct, not %q" .Values.runtimedAPI) }}
{{- end }}
{{- if and (eq .Values.runtimedAPI "direct") (eq .Values.tls.type "secret") .Values.apiService.caBundle }}
{{- fail "runtimedAPI=direct gives runtimed the serving Secret's ca.crt, but with tls.type=secret and apiService.caBundle that Secret need not have one: put ca.crt in the Secret and unset apiService.caBundle, or keep runtimedAPI=aggregated" }}
{{- end }}
{{- if and (eq .Values.invokeEndpoint "direct") (eq .Values.tls.type "secret") .Values.apiService.caBundle }}
{{- fail "invokeEndpoint=direct gives callers the serving Secret's ca.crt, but with tls.type=secret and apiService.caBundle that Secret need not have one: put ca.crt in the Secret and unset apiService.caBundle, or keep invokeEndpoint=aggregated" }}
{{- end }}
{{- if and (not .Values.controllers.hosted) (lt (int .Values.controllers.replicas) 1) }}
{{- fail (printf "controllers.replicas must be at least 1, not %d: without a replica no Runtime gets Pods and no Run is scheduled (or set controllers.hosted: true)" (int .Values.controllers.replicas)) }}
{{- end }}
{{- if lt (int .Values.replicas) 1 }}
{{- fail (printf "replicas must be at least 1, not %d: without a replica the APIService is unavailable and Runs cannot be read" (int .Values.replicas)) }}
{{- end }}
{{- end }}

{{/*
notes is NOTES.txt's text, a named template so that the tests render it
(helm template does not render NOTES.txt).
*/}}
{{- define "kruntimes.notes" -}}
kruntimes {{ .Chart.AppVersion }} is installed in {{ include "kruntimes.namespace" . }} (release {{ .Release.Name }}).

The API kruntimes.io/v1alpha1 is served once the APIService is Available:

  kubectl wait --for=condition=Available apiservice/v1alpha1.kruntimes.io --timeout=3m
  kubectl get runtimes,runs -A

Give people the roles kruntimes-edit, kruntimes-view and kruntimes-invoker
with a RoleBinding in the namespaces where they work.
{{- if eq (include "kruntimes.runtimedCAType" .) "none" }}

runtimedCA.type=none: runs/invoke answers 503 and function Runs cannot be
invoked; task Runs work.
{{- end }}
{{- if and (or .Values.runtimes.bash.enabled .Values.runtimes.python.enabled) (not (.Capabilities.APIVersions.Has "kruntimes.io/v1alpha1/Runtime")) }}

The built-in Runtimes (runtimes.*) were left out: the cluster did not serve
kruntimes.io/v1alpha1 yet. Once the APIService is Available, create them with

  helm upgrade {{ .Release.Name }} <this chart> --namespace {{ .Release.Namespace }} --reuse-values
{{- end }}
{{- if eq .Values.storage.backend "embedded" }}

Runs and Runtimes are stored on the PersistentVolumeClaim
{{ include "kruntimes.namespace" . }}/{{ default "kruntimes-data" .Values.storage.embedded.existingClaim }}.
{{- if and .Values.storage.embedded.keep (not .Values.storage.embedded.existingClaim) }} helm uninstall keeps it (helm.sh/resource-policy: keep),
so a reinstall finds them again; delete it with

  kubectl delete pvc kruntimes-data --namespace {{ include "kruntimes.namespace" . }}

to remove them for good.
{{- end }}
{{- end }}
{{- end }}
