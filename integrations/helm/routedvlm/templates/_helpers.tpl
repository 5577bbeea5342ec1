{{/* The release's name for the serve objects, at most 63 characters. */}}
{{- define "routedvlm.fullname" -}}
{{- printf "%s-routedvlm" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Labels of every object. */}}
{{- define "routedvlm.labels" -}}
app.kubernetes.io/name: routedvlm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The serve pods' selector. */}}
{{- define "routedvlm.selectorLabels" -}}
app.kubernetes.io/name: routedvlm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: serve
{{- end }}
