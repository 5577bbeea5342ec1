"""`helm template` for the tests, without helm: renders a chart whose templates keep to a small subset of Helm's Go
templates, by translating each action to Jinja with Go's semantics, and raises on anything outside the subset (so
the chart cannot quietly use what this renderer does not understand).

The subset: `{{ PIPELINE }}`, `{{- ... -}}` trimming, `/* comments */`, `if` / `else if` / `else` / `end`,
`range $v := X` and `range $k, $v := X` (maps in key order, as Go), `$x := X`, `define "name"` in _*.tpl files and
`include "name" .`; terms `.Values.a.b`, `.Release.*`, `.Chart.*`, `$.…`, `$var.field`, strings, integers, booleans,
`(PIPELINE)`; the functions in FUNCTIONS. Inside `range`, `.` is not the root (Go rebinds it): use `$.Values`.
A missing map key is nil (false in `if`); a field of a missing value is an error, as in Go; printing nil is an
error here (Go prints `<no value>`, never what a manifest wants).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import yaml

ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(\()|(\))|(\|)|(:=)|(,)|([^\s()|,]+))')
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TemplateError(ValueError):
    """A template outside the subset, or one that fails to render."""


def _get(value, path: list, where: str):
    for i, key in enumerate(path):
        if value is None:
            raise TemplateError(f"{where}: nil pointer evaluating .{'.'.join(path[:i + 1])}")
        if isinstance(value, dict):
            value = value.get(key)
        else:
            raise TemplateError(f"{where}: can't evaluate field {key} in {type(value).__name__}")
    return value


def _to_yaml(value) -> str:
    if value is None:
        return "null"
    if value == {} or value == []:
        return "{}" if isinstance(value, dict) else "[]"
    return yaml.safe_dump(value, sort_keys=True, default_flow_style=False).rstrip("\n")


def _indent(n, text) -> str:
    return "\n".join(" " * int(n) + line for line in str(text).split("\n"))


def _text(value) -> str:
    """A value as Go's text/template prints it (booleans lower case)."""
    return {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else str(value)


def _quote(*values) -> str:
    return " ".join(json.dumps(_text(v)) for v in values if v is not None)


def _default(fallback, value=None):
    return value if value not in (None, "", [], {}, False, 0) else fallback


def _required(message, value):
    if value in (None, ""):
        raise TemplateError(message)
    return value


def _fail(message):
    raise TemplateError(message)


def _printf(fmt, *args) -> str:
    return re.sub(r"%[sdv]", "{}", fmt).format(*(_text(a) for a in args))


def _range2(value):
    if isinstance(value, dict):
        return sorted(value.items())
    return list(enumerate(value or []))


FUNCTIONS = {
    "toYaml": _to_yaml, "nindent": lambda n, t: "\n" + _indent(n, t), "indent": _indent, "quote": _quote,
    "default": _default, "required": _required, "fail": _fail, "printf": _printf, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "not": lambda a: not a, "and": lambda *a: all(a), "or": lambda *a: any(a),
    "trunc": lambda n, s: str(s)[:int(n)], "trimSuffix": lambda suf, s: s[:-len(suf)] if suf and s.endswith(suf) else s,
    "toString": _text, "int": int, "add": lambda *a: sum(int(x) for x in a), "empty": lambda v: not v, "hasKey": lambda d, k: k in (d or {}),
    "lower": lambda s: str(s).lower(), "replace": lambda old, new, s: str(s).replace(old, new),
    "toJson": lambda v: json.dumps(v, sort_keys=True),
}


class _Translator:
    """Go actions -> Jinja source, one template file at a time."""

    def __init__(self, where: str):
        self.where, self.blocks, self.range_depth = where, [], 0

    def tokens(self, text: str) -> list:
        out, pos = [], 0
        while pos < len(text):
            m = TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip():
                    raise TemplateError(f"{self.where}: cannot read {text[pos:]!r}")
                break
            out.append(next(g for g in m.groups() if g is not None))
            pos = m.end()
        return out

    def term(self, tok: str, toks: list) -> str:
        if tok == "(":
            inner = self.pipeline(toks, closing=")")
            return f"({inner})"
        if tok.startswith('"'):
            return json.dumps(json.loads(tok))
        if re.fullmatch(r"-?\d+", tok) or tok in ("true", "false"):
            return {"true": "True", "false": "False"}.get(tok, tok)
        if tok == ".":
            self.check_root(tok)
            return "ctx"
        if tok.startswith("."):
            self.check_root(tok)
            return self.path("ctx", tok[1:])
        if tok == "$":
            return "ctx"
        if tok.startswith("$."):
            return self.path("ctx", tok[2:])
        if tok.startswith("$"):
            var, _, rest = tok[1:].partition(".")
            if not NAME.fullmatch(var):
                raise TemplateError(f"{self.where}: bad variable {tok!r}")
            return self.path(f"v_{var}", rest) if rest else f"v_{var}"
        raise TemplateError(f"{self.where}: unknown term {tok!r} (functions: {sorted(FUNCTIONS)})")

    def check_root(self, tok: str) -> None:
        if self.range_depth:
            raise TemplateError(f"{self.where}: {tok!r} inside range is the element in Go, not the root: use '$.'")

    def path(self, base: str, dotted: str) -> str:
        keys = dotted.split(".")
        if not all(NAME.fullmatch(k) for k in keys):
            raise TemplateError(f"{self.where}: bad field path {dotted!r}")
        return f"get({base}, {keys!r}, {self.where!r})"

    def command(self, toks: list, piped: str | None, closing: str | None) -> str:
        words = []
        while toks and toks[0] not in ("|", closing):
            tok = toks.pop(0)
            if tok == ")":
                raise TemplateError(f"{self.where}: unbalanced ')'")
            words.append(tok if tok in FUNCTIONS or tok == "include" else self.term(tok, toks))
        if not words:
            raise TemplateError(f"{self.where}: empty command")
        head, args = words[0], words[1:]
        if head == "include":
            head, args = "fn_include", args
        elif head in FUNCTIONS:
            head = f"fn_{head}"
        elif args or piped is not None:
            raise TemplateError(f"{self.where}: {head!r} is not a function")
        else:
            return head
        if any(a in FUNCTIONS for a in args):
            raise TemplateError(f"{self.where}: a function as an argument needs parentheses")
        return f"{head}({', '.join([*args, *([piped] if piped is not None else [])])})"

    def pipeline(self, toks: list, closing: str | None = None) -> str:
        out = self.command(toks, None, closing)
        while toks and toks[0] == "|":
            toks.pop(0)
            out = self.command(toks, out, closing)
        if closing is not None:
            if not toks or toks.pop(0) != closing:
                raise TemplateError(f"{self.where}: missing {closing!r}")
        return out

    def expression(self, text: str) -> str:
        toks = self.tokens(text)
        out = self.pipeline(toks)
        if toks:
            raise TemplateError(f"{self.where}: unexpected {toks!r}")
        return out

    def action(self, left: str, body: str, right: str) -> str:
        open_, close = "{%" + left, right + "%}"
        word = body.split(None, 1)[0] if body else ""
        rest = body[len(word):].strip()
        if body.startswith("/*"):
            if not body.endswith("*/"):
                raise TemplateError(f"{self.where}: unterminated comment")
            return "{#" + left + " " + right + "#}"
        if word == "if":
            self.blocks.append("if")
            return f"{open_} if {self.expression(rest)} {close}"
        if word == "else":
            if not self.blocks or self.blocks[-1] != "if":
                raise TemplateError(f"{self.where}: else outside if")
            if rest.startswith("if "):
                return f"{open_} elif {self.expression(rest[3:])} {close}"
            return f"{open_} else {close}"
        if word == "range":
            m = re.fullmatch(r"\$(\w+)\s*(?:,\s*\$(\w+)\s*)?:=\s*(.+)", rest, re.S)
            if not m:
                raise TemplateError(f"{self.where}: range needs '$v := X' or '$k, $v := X' (got {rest!r})")
            expr = self.expression(m.group(3))
            self.blocks.append("for")
            self.range_depth += 1
            if m.group(2):
                return f"{open_} for v_{m.group(1)}, v_{m.group(2)} in fn_range2({expr}) {close}"
            return f"{open_} for v_{m.group(1)} in ({expr} or []) {close}"
        if word == "end":
            if not self.blocks:
                raise TemplateError(f"{self.where}: end without a block")
            kind = self.blocks.pop()
            self.range_depth -= kind == "for"
            return f"{open_} end{kind} {close}"
        if word in ("with", "template", "block", "define", "tpl"):
            raise TemplateError(f"{self.where}: {word!r} is outside this renderer's subset")
        m = re.fullmatch(r"\$(\w+)\s*:=\s*(.+)", body, re.S)
        if m:
            return f"{open_} set v_{m.group(1)} = {self.expression(m.group(2))} {close}"
        return "{{" + left + " " + self.expression(body) + " " + right + "}}"

    def translate(self, source: str) -> str:
        if "{%" in source or "{#" in source:
            raise TemplateError(f"{self.where}: Jinja syntax in a Go template")
        out = ACTION.sub(lambda m: self.action(m.group(1), m.group(2), m.group(3)), source)
        if self.blocks:
            raise TemplateError(f"{self.where}: {len(self.blocks)} block(s) without end")
        return out


def _defines(source: str, where: str) -> dict:
    """{name: body} of the `define` blocks of a helpers file (nothing else may be in it but comments/space)."""
    out, pos = {}, 0
    for m in re.finditer(r'\{\{-?\s*define\s+"([^"]+)"\s*(-?)\}\}(.*?)\{\{(-?)\s*end\s*-?\}\}', source, re.S):
        body = m.group(3).lstrip() if m.group(2) else m.group(3)  # the define's and the end's own trim markers
        out[m.group(1)] = body.rstrip() if m.group(4) else body
        between = source[pos:m.start()]
        if ACTION.sub("", between).strip():
            raise TemplateError(f"{where}: text outside define blocks")
        pos = m.end()
    return out


def render_chart(chart: Path, values: dict | None = None, *, release: str = "rv", namespace: str = "default") -> dict:
    """{template file name: rendered text} of `chart` with `values` merged over its values.yaml, as
    `helm template RELEASE CHART --namespace NAMESPACE -f values` would."""
    import jinja2

    chart = Path(chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    merged = _merge(yaml.safe_load((chart / "values.yaml").read_text()) or {}, values or {})
    ctx = {"Values": merged, "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
           "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta.get("appVersion")}}

    def finalize(value):
        if value is None:
            raise TemplateError("a template printed a missing value (nil)")
        return _text(value)

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                             finalize=finalize)
    env.globals.update({f"fn_{k}": v for k, v in FUNCTIONS.items()}, get=_get, fn_range2=_range2)
    helpers = {}
    for path in sorted((chart / "templates").glob("_*.tpl")):
        for name, body in _defines(path.read_text(), path.name).items():
            helpers[name] = env.from_string(_Translator(f"{path.name}:{name}").translate(body))

    def include(name, context):
        if name not in helpers:
            raise TemplateError(f"include of an undefined template {name!r}")
        return helpers[name].render(ctx=context)

    env.globals["fn_include"] = include
    out = {}
    for path in sorted((chart / "templates").glob("*.yaml")):
        template = env.from_string(_Translator(path.name).translate(path.read_text()))
        try:
            out[path.name] = template.render(ctx=ctx)
        except jinja2.UndefinedError as exc:
            raise TemplateError(f"{path.name}: {exc}") from None
    return out


def manifests(rendered: dict) -> list:
    """The Kubernetes objects of rendered templates (empty documents dropped), each parsed from YAML."""
    docs = []
    for name, text in rendered.items():
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                docs.append(doc)
    return docs


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
