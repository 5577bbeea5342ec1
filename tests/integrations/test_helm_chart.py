"""The Helm chart (integrations/helm/routedvlm): rendered here without helm (helm_render.py) under the values a user
sets, every manifest validated against the Kubernetes 1.34 schemas (kubernetes-validate, strict), and the serve
container's command line, as the image's entrypoint builds it from the rendered env, parsed by `routedvlm serve`."""
import os
import re
import subprocess
from pathlib import Path

import pytest
from helm_render import TemplateError, manifests, render_chart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "integrations" / "helm" / "routedvlm"
ENTRYPOINT = ROOT / "integrations" / "container" / "entrypoint.sh"
MODELS = ["http://vllm-small:8000/v1#Qwen/Qwen3-VL-2B-Instruct", "http://vllm-large:8000/v1#Qwen/Qwen3-VL-8B-Instruct"]
K8S = "1.34.0"


def objects(values=None):
    """{(kind, name): object} of the chart rendered with `values`, each validated against the Kubernetes schemas."""
    import kubernetes_validate

    out = {}
    for doc in manifests(render_chart(CHART, values)):
        if doc["apiVersion"] != "monitoring.coreos.com/v1":  # a CRD: checked by the tests below
            kubernetes_validate.validate(doc, K8S, strict=True)
        out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def container(objs, name="rv-routedvlm"):
    return objs[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]


def env_of(c) -> dict:
    """The container's env: values with Kubernetes' $(VAR) expansion of earlier plain entries, else the valueFrom."""
    out = {}
    for e in c["env"]:
        if "value" in e:
            out[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: out[m.group(1)] if isinstance(out.get(m.group(1)), str)
                                    else m.group(0), e["value"])
        else:
            out[e["name"]] = e["valueFrom"]
    return out


def models_of(c) -> list:
    args = c["args"]
    return [args[i + 1] for i, a in enumerate(args) if a == "--model"]


def test_without_models_or_backends_the_chart_says_what_to_set():
    with pytest.raises(TemplateError, match=r"set `models` \(2 or more, cheapest first\) or `vllm.enabled`"):
        render_chart(CHART)


def test_serve_deployment_probes_and_service():
    objs = objects({"models": MODELS, "replicaCount": 3})
    dep, svc = objs[("Deployment", "rv-routedvlm")], objs[("Service", "rv-routedvlm")]
    c = container(objs)
    assert dep["spec"]["replicas"] == 3 and models_of(c) == MODELS
    assert (c["readinessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["path"]) == ("/ready", "/live")
    assert c["readinessProbe"]["httpGet"]["port"] == c["ports"][0]["name"] == svc["spec"]["ports"][0]["targetPort"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert env_of(c)["ROUTEDVLM_REPLICA_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # one id per pod
    assert not any(kind == "ServiceMonitor" for kind, _ in objs)  # needs the operator's CRD: off by default


def test_a_wrong_value_fails_kubernetes_validation():
    import kubernetes_validate

    with pytest.raises(kubernetes_validate.ValidationError):
        objects({"models": MODELS, "replicaCount": "two"})


def test_the_chart_s_vllm_backends_are_the_default_ladder():
    objs = objects({"vllm": {"enabled": True}})
    urls = models_of(container(objs))
    assert urls == ["http://rv-routedvlm-vllm-small:8000/v1#Qwen/Qwen3-VL-2B-Instruct",
                    "http://rv-routedvlm-vllm-large:8000/v1#Qwen/Qwen3-VL-8B-Instruct"]
    for name in ("small", "large"):
        svc, dep = objs[("Service", f"rv-routedvlm-vllm-{name}")], objs[("Deployment", f"rv-routedvlm-vllm-{name}")]
        assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        vllm = dep["spec"]["template"]["spec"]["containers"][0]
        assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(vllm["args"])
        served = vllm["args"][vllm["args"].index("--served-model-name") + 1]
        assert any(u.endswith(f"#{served}") and f"-vllm-{name}:" in u for u in urls)


def test_vllm_router_in_front_of_each_backend_hashes_on_the_session_header():
    objs = objects({"vllm": {"enabled": True, "backends": [
        {"name": "small", "model": "s", "replicas": 1}, {"name": "large", "model": "l", "replicas": 3}],
        "router": {"enabled": True}}})
    c = container(objs)
    assert models_of(c) == ["http://rv-routedvlm-vllm-small-router:8000/v1#s",
                            "http://rv-routedvlm-vllm-large-router:8000/v1#l"]
    assert env_of(c)["ROUTEDVLM_SESSION_HEADER"] == "x-session-id"
    assert objs[("Deployment", "rv-routedvlm-vllm-large")]["spec"]["replicas"] == 3
    router = objs[("Deployment", "rv-routedvlm-vllm-large-router")]["spec"]["template"]["spec"]
    args = router["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == "consistent_hash"
    selector = dict(a.split("=", 1) for a in args[args.index("--selector") + 1:args.index("--service-discovery-port")])
    vllm_pods = objs[("Deployment", "rv-routedvlm-vllm-large")]["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= vllm_pods.items()  # it discovers exactly the large backend's pods
    binding = objs[("RoleBinding", "rv-routedvlm-vllm-router")]
    assert binding["subjects"][0]["name"] == router["serviceAccountName"]
    assert "watch" in objs[("Role", "rv-routedvlm-vllm-router")]["rules"][0]["verbs"]


def test_service_monitor_scrapes_every_serve_pod():
    objs = objects({"models": MODELS, "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    mon, svc = objs[("ServiceMonitor", "rv-routedvlm")], objs[("Service", "rv-routedvlm")]
    assert mon["metadata"]["labels"]["release"] == "prom"
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert mon["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    assert svc["spec"]["ports"][0]["name"] == "http"


def test_audit_log_one_file_per_replica_and_router_from_a_volume():
    objs = objects({"models": MODELS, "audit": {"rate": 0.05, "volume": {"persistentVolumeClaim": {"claimName": "a"}}},
                    "router": {"volume": {"persistentVolumeClaim": {"claimName": "r"}}},
                    "feedbackKey": {"existingSecret": "gold"}})
    c, spec = container(objs), objs[("Deployment", "rv-routedvlm")]["spec"]["template"]["spec"]
    env = env_of(c)
    names = [e["name"] for e in c["env"]]
    assert names.index("ROUTEDVLM_REPLICA_ID") < names.index("ROUTEDVLM_SERVE_AUDIT_LOG")  # $(…) needs it first
    assert env["ROUTEDVLM_SERVE_AUDIT_LOG"] == "/routedvlm/audit/$(ROUTEDVLM_REPLICA_ID).parquet"
    assert env["ROUTEDVLM_ROUTER"] == "/routedvlm/router"
    assert env["ROUTEDVLM_FEEDBACK_KEY"] == {"secretKeyRef": {"name": "gold", "key": "feedback-key"}}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["router"]["readOnly"] and mounts["audit"]["mountPath"] == "/routedvlm/audit"
    assert {v["name"]: v for v in spec["volumes"]}["audit"]["persistentVolumeClaim"] == {"claimName": "a"}


def test_the_rendered_container_starts_a_valid_serve_command(tmp_path):
    """The env and args the chart gives the container, through the image's entrypoint, are a command line that
    `routedvlm serve` accepts, with the router, the replica id and the audit settings the values asked for."""
    from routedvlm.inference.serving.cli import ServeConfig, build_parser

    objs = objects({"models": MODELS, "router": {"uri": "models:/vlm-router@champion", "trackingUri": "http://mlflow:5000"},
                    "audit": {"rate": 0.05, "storeInputs": True, "volume": {"emptyDir": {}}},
                    "serve": {"extraArgs": ["--max-images", "2"]}})
    c = container(objs)
    env = {k: v for k, v in env_of(c).items() if isinstance(v, str)}
    env["ROUTEDVLM_REPLICA_ID"] = "rv-routedvlm-6d4f-x2"  # what the fieldRef gives the pod
    env["ROUTEDVLM_SERVE_AUDIT_LOG"] = env["ROUTEDVLM_SERVE_AUDIT_LOG"].replace("$(ROUTEDVLM_REPLICA_ID)", "rv-routedvlm-6d4f-x2")
    run = subprocess.run(["bash", str(ENTRYPOINT), *c["args"]], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ["PATH"], "ROUTEDVLM_ENTRYPOINT_DRY_RUN": "1", **env})
    assert run.returncode == 0, run.stderr
    argv = run.stdout.splitlines()
    assert argv[:2] == ["routedvlm", "serve"]
    cfg = ServeConfig(**vars(build_parser().parse_args(argv[2:])))
    assert (cfg.models, cfg.router, cfg.tracking_uri, cfg.host, cfg.port) == (
        MODELS, "models:/vlm-router@champion", "http://mlflow:5000", "0.0.0.0", 8000)
    assert (cfg.replica_id, cfg.audit_rate, cfg.audit_store_inputs, cfg.max_images) == ("rv-routedvlm-6d4f-x2", 0.05, True, 2)
    assert cfg.audit_log == "/routedvlm/audit/rv-routedvlm-6d4f-x2.parquet"
