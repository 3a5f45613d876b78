"""Renders the karpenter chart with the real Helm SDK (PyPI helm-python-sdk) and checks it.

Reads one JSON request on stdin:
    {"chart": DIR, "values": {...}, "name": "karpenter", "namespace": "kube-system",
     "kube_versions": ["1.26.0", "1.37.0"], "lint": true,
     "api_versions": ["monitoring.coreos.com/v1"]}   # extra .Capabilities.APIVersions
and prints one JSON report on stdout:
    {"error": str | null,            # render failure (e.g. a `required` value), else null
     "documents": [ {...}, ... ],    # every rendered object
     "notes": str | null,            # the rendered NOTES.txt
     "invalid": [ {"object": "Kind/name", "version": "1.26.0", "error": "..."} ],
     "unvalidated": ["Kind/name"],   # kinds without a bundled schema (e.g. ServiceMonitor)
     "lint": {"messages": [...], "errors": [...]} | null}

Validation uses PyPI kubernetes-validate in strict mode (unknown fields are errors).
"""

import json
import sys

import kubernetes_validate
import yaml
from helm_python import Chart, HelmError, _native, lint


def render(chart, request):
    """Chart.render, plus the SDK's `api_versions` option its Python wrapper does not expose."""
    options = {
        "name": request.get("name", "karpenter"),
        "namespace": request.get("namespace", "kube-system"),
        "is_install": True,
    }
    if request.get("api_versions"):
        options["api_versions"] = request["api_versions"]
    rendered = _native.call_string(
        "helm_render", chart._raw(), json.dumps(request.get("values") or {}), json.dumps(options)
    )
    return json.loads(rendered)


def main() -> None:
    request = json.load(sys.stdin)
    report = {"error": None, "documents": [], "notes": None, "invalid": [], "unvalidated": [],
              "lint": None}
    chart = Chart.load(request["chart"])
    try:
        rendered = render(chart, request)
    except HelmError as error:
        report["error"] = str(error)
        print(json.dumps(report))
        return
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            report["notes"] = rendered[path]
            continue
        for document in yaml.safe_load_all(rendered[path]):
            if document:
                report["documents"].append(document)
    for document in report["documents"]:
        name = f'{document.get("kind")}/{document.get("metadata", {}).get("name")}'
        for version in request.get("kube_versions", []):
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                if name not in report["unvalidated"]:
                    report["unvalidated"].append(name)
            except kubernetes_validate.ValidationError as error:
                path = "/".join(str(p) for p in error.path)
                report["invalid"].append(
                    {"object": name, "version": version, "error": f"{path}: {error.message}"}
                )
    if request.get("lint"):
        result = lint(request["chart"], request.get("values") or {}, strict=True)
        report["lint"] = {"messages": result.get("messages", []), "errors": result.get("errors", [])}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
