"""Writes charts/karpenter/README.md from values.yaml: every value with its default and the
`# --` comment above it. `--check` exits 1 when the README is out of date (tests/chart.rs runs it).
"""

import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent.parent / "charts" / "karpenter"

HEADER = """# karpenter chart

Deploys the karpenter controller (`karpenter run`): a Kubernetes node autoscaler for AWS
compatible with Karpenter v1.5. A Karpenter v1.5 `values.yaml` works unchanged; keys this chart
does not use are accepted and named in the install notes. `settings.clusterName` is required.
The ServiceMonitor renders only where the Prometheus Operator's `monitoring.coreos.com/v1` is
served.

```sh
helm install karpenter charts/karpenter --namespace kube-system \\
  --set settings.clusterName=my-cluster \\
  --set settings.interruptionQueue=my-cluster \\
  --set serviceAccount.annotations."eks\\.amazonaws\\.com/role-arn"=arn:aws:iam::111122223333:role/KarpenterController
```

Hardened defaults beyond Karpenter's: the pod runs as non-root (`podSecurityContext.runAsNonRoot:
true`), and the controller has resource requests. The CRDs are in `crds/` (also published as the
`karpenter-crd` chart).

## Dashboards

Karpenter's Grafana dashboards work unchanged against this controller's `/metrics` (port
`http-metrics`, Prometheus job `karpenter`): the metric names, types, labels and buckets are
Karpenter v1.5's, with controller-runtime's `controller_runtime_*` and `workqueue_*` families
exported per controller. They are not copied here; take them from Karpenter's repository,
`aws/karpenter-provider-aws` at `v1.5.0`, under
`website/content/en/docs/getting-started/getting-started-with-karpenter/`:
`karpenter-capacity-dashboard.json` and `karpenter-performance-dashboard.json` (the two that
Karpenter's `grafana-values.yaml` installs), and `karpenter-controllers-dashboard.json`.
`tests/fixtures/karpenter-dashboard-queries.txt` lists every metric and label the capacity and
performance dashboards query, and a test checks each is exported after a simulation. The
capacity dashboard's node-age panel also needs node-exporter (`node_time_seconds`,
`node_boot_time_seconds`); `karpenter-controllers-allocation-dashboard.json` queries
`karpenter_allocation_controller_*`, which no Karpenter v1.5 exports either.

## Values

Generated from `values.yaml` by `scripts/chart_readme.py`.

| Key | Default | Description |
|---|---|---|
"""


def described_keys(text: str):
    """Yields (dotted key, description) for every key preceded by a `# --` comment."""
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        comment = re.match(r"^(\s*)# -- ?(.*)$", line)
        continuation = re.match(r"^(\s*)# ?(.*)$", line)
        key = re.match(r"^(\s*)([A-Za-z0-9_]+):", line)
        if comment:
            pending = [comment.group(2)]
        elif continuation and pending:
            pending.append(continuation.group(2))
        elif key:
            indent = len(key.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key.group(2)))
            if pending:
                yield ".".join(name for _, name in stack), " ".join(pending)
            pending = []


def lookup(values, dotted: str):
    for part in dotted.split("."):
        values = (values or {}).get(part)
    return values


def leaves(values, prefix=""):
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip(".")


def undocumented() -> list[str]:
    text = (CHART / "values.yaml").read_text()
    described = {key for key, _ in described_keys(text)}
    missing = []
    for leaf in leaves(yaml.safe_load(text)):
        parts = leaf.split(".")
        if not any(".".join(parts[:n]) in described for n in range(1, len(parts) + 1)):
            missing.append(leaf)
    return missing


def render() -> str:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    rows = []
    for key, description in described_keys(text):
        default = json.dumps(lookup(values, key))
        rows.append(f"| `{key}` | `{default}` | {description} |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> None:
    readme = CHART / "README.md"
    expected = render()
    if "--check" in sys.argv[1:]:
        missing = undocumented()
        if missing:
            print(f"values without a `# --` description: {missing}", file=sys.stderr)
            sys.exit(1)
        if not readme.exists() or readme.read_text() != expected:
            print(f"{readme} is out of date: run scripts/chart_readme.py", file=sys.stderr)
            sys.exit(1)
        return
    readme.write_text(expected)


if __name__ == "__main__":
    main()
