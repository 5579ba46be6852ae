"""Validate deploy/k8s (issue 16): every resource against the Kubernetes
JSON schemas of a pinned version (kubernetes-validate, strict: no unknown
field), and what no schema checks: the references between the resources.

    python3 tests/k8s/validate.py KUBERNETES_VERSION [DIRECTORY]

Run by tests/api/k8s.rs in a virtual environment with kubernetes-validate.
Prints every problem, and exits 1 if there is one.
"""

import pathlib
import sys

import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

version = sys.argv[1]
here = pathlib.Path(__file__).resolve().parent
directory = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else here.parent.parent / "deploy" / "k8s"

problems = []
resources = {}  # (kind, name) -> resource
files = sorted(directory.glob("*.yaml"))
kustomization = None
for path in files:
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        kind = doc["kind"]
        if kind == "Kustomization":
            kustomization = (path, doc)
            continue
        name = doc["metadata"]["name"]
        resources[(kind, name)] = doc
        try:
            kubernetes_validate.validate(doc, version, strict=True)
            print(f"ok {path.name}: {kind}/{name} against Kubernetes {version}")
        except ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            problems.append(f"{path.name}: {kind}/{name}: {where}: {e.message}")
        except SchemaNotFoundError:
            if kind != "ServiceMonitor":
                problems.append(f"{path.name}: {kind}/{name}: no schema for {doc['apiVersion']}")
            else:
                print(f"   {path.name}: {kind}/{name} is a Prometheus Operator resource: checked below")


def one(kind):
    found = [r for (k, _), r in resources.items() if k == kind]
    if len(found) != 1:
        problems.append(f"expected one {kind}, found {len(found)}")
        return None
    return found[0]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


# Kustomize lists every other file, and nothing else.
if kustomization is None:
    problems.append("no kustomization.yaml")
else:
    listed = set(kustomization[1].get("resources", []))
    others = {p.name for p in files if p.name != kustomization[0].name}
    if listed != others:
        problems.append(f"kustomization.yaml lists {sorted(listed)}, the directory holds {sorted(others)}")

deployment, service, pdb, monitor = (one(k) for k in ["Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor"])
secrets = {name: r for (k, name), r in resources.items() if k == "Secret"}
if deployment and service and pdb and monitor:
    spec = deployment["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    if not selects(spec["selector"]["matchLabels"], pod_labels):
        problems.append("the Deployment's selector does not select its own pods")
    if spec["replicas"] < 2:
        problems.append("one replica: nothing to share work with")
    if not selects(service["spec"]["selector"], pod_labels):
        problems.append("the Service does not select the Deployment's pods")
    if not selects(pdb["spec"]["selector"]["matchLabels"], pod_labels):
        problems.append("the PodDisruptionBudget does not select the Deployment's pods")
    if not selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]):
        problems.append("the ServiceMonitor does not select the Service")
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        if endpoint.get("port") not in service_ports:
            problems.append(f"the ServiceMonitor scrapes port {endpoint.get('port')!r}, not a Service port")
        if endpoint.get("path") != "/metrics":
            problems.append("the ServiceMonitor does not scrape /metrics")
    (container,) = spec["template"]["spec"]["containers"]
    container_ports = {p["name"] for p in container["ports"]}
    for port in service["spec"]["ports"]:
        if port["targetPort"] not in container_ports:
            problems.append(f"the Service targets port {port['targetPort']!r}, not a container port")
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
        get = container.get(probe, {}).get("httpGet")
        if not get or get["path"] != path or get["port"] not in container_ports:
            problems.append(f"{probe} is not GET {path} on a container port")
    resources_ = container.get("resources", {})
    if "requests" not in resources_ or "memory" not in resources_.get("limits", {}):
        problems.append("the container has no requests or memory limit")
    for env in container.get("env", []):
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            secret = secrets.get(ref["name"])
            if secret is None or ref["key"] not in secret.get("stringData", secret.get("data", {})):
                problems.append(f"{env['name']} names secret key {ref['name']}/{ref['key']}, which no Secret holds")
    if not any(e["name"] == "DATABASE_URL" for e in container.get("env", [])):
        problems.append("the replicas are not given the shared database (DATABASE_URL)")

for problem in problems:
    print("PROBLEM", problem)
print(f"{len(resources)} resources, {len(problems)} problems")
sys.exit(1 if problems else 0)
