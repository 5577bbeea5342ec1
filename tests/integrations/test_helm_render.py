"""The tests' chart renderer (helm_render.py) on hand-checked templates: Go's trimming, pipelines, ranges and nil
semantics, and a clear error for everything outside its subset."""
import pytest
import yaml
from helm_render import TemplateError, render_chart


def chart(tmp_path, templates: dict, values: dict | None = None, helpers: str = ""):
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 1.2.3\nappVersion: '9'\n")
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values or {}))
    for name, text in templates.items():
        (tmp_path / "templates" / name).write_text(text)
    if helpers:
        (tmp_path / "templates" / "_helpers.tpl").write_text(helpers)
    return tmp_path


def test_worked_example(tmp_path):
    helpers = '{{- define "c.name" -}}\n{{ .Release.Name }}-{{ .Chart.Name }}\n{{- end }}\n'
    text = ('a: {{ include "c.name" . }}\n'
            'b:\n  {{- toYaml .Values.m | nindent 2 }}\n'
            '{{- if .Values.on }}\nc: {{ .Values.n | default 7 | quote }}\n{{- else }}\nc: off\n{{- end }}\n'
            'd:\n{{- range $k, $v := .Values.m }}\n  - {{ $k }}={{ $v }}\n{{- end }}\n'
            'e: {{ printf "%s:%s" .Chart.Version (.Values.tag | default .Chart.AppVersion) }}\n'
            'f: {{ .Values.on }}\n')
    out = render_chart(chart(tmp_path, {"t.yaml": text}, {"m": {"y": 2, "x": 1}, "on": True, "n": ""}, helpers),
                       {"tag": None}, release="r")["t.yaml"]
    assert out == 'a: r-c\nb:\n  x: 1\n  y: 2\nc: "7"\nd:\n  - x=1\n  - y=2\ne: 1.2.3:9\nf: true\n'


def test_overrides_merge_into_the_values(tmp_path):
    path = chart(tmp_path, {"t.yaml": "{{ .Values.a.b }} {{ .Values.a.c }}\n"}, {"a": {"b": 1, "c": 2}})
    assert render_chart(path, {"a": {"c": 3}})["t.yaml"] == "1 3\n"


@pytest.mark.parametrize("text, match", [
    ("{{ .Values.missing.field }}", r"nil pointer evaluating \.Values\.missing\.field"),
    ("{{ .Values.missing }}", r"printed a missing value"),
    ("{{ with .Values.a }}x{{ end }}", r"'with' is outside this renderer's subset"),
    ("{{ if .Values.a }}x", r"block\(s\) without end"),
    ("{{ range $v := .Values.l }}{{ .Values.a }}{{ end }}", r"inside range is the element in Go"),
    ("{{ frobnicate .Values.a }}", r"unknown term 'frobnicate'"),
    ("{{ required \"set a\" .Values.none }}", r"^set a$"),
])
def test_outside_the_subset_or_wrong_it_raises(tmp_path, text, match):
    with pytest.raises(TemplateError, match=match):
        render_chart(chart(tmp_path, {"t.yaml": text}, {"a": 1, "l": [1]}))
