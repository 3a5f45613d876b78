#!/usr/bin/env python3
"""Generates actors/src/providers/data/on-demand-prices.json, the built-in on-demand price table.

Source of the listed prices: Karpenter v1.5.0's generated static price table
(pkg/providers/pricing/zz_generated.pricing_aws.go in aws/karpenter-provider-aws, Apache-2.0),
which Karpenter generated on 2025-04-28 from the public AWS Price List API for us-east-1, Linux,
shared tenancy. Pass that file as the only argument, for example

    git -C <karpenter-provider-aws clone> show v1.5.0:pkg/providers/pricing/zz_generated.pricing_aws.go > /tmp/p.go
    python3 scripts/gen_aws_prices.py /tmp/p.go

Instance types of the kwok catalogue (instance-types.json) that the table does not list get an
estimate, kept apart under "estimated":
  1. another size of the same family is listed: its price per vCPU times this type's vCPUs
     (EC2 sizes within a family are priced linearly);
  2. otherwise the same family name at the nearest older generation (c8gn -> c7gn -> c6gn) is
     listed: its median price per vCPU times this type's vCPUs;
  3. otherwise the least-squares fit, over every listed type, of
     price = a * vCPU + b * memory GiB + c * GPUs + d * Neuron devices.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(__file__)
CATALOGUE = os.path.join(HERE, "..", "actors", "src", "kwok", "data")
DATA = os.path.join(HERE, "..", "actors", "src", "aws", "data")


def solve(matrix, vector):
    """Gaussian elimination for the small normal equations."""
    n = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col and a[col][col]:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] if a[i][i] else 0.0 for i in range(n)]


def features(t):
    gpus = sum(g["count"] for g in t.get("gpus", []))
    neuron = sum(d["count"] for d in t.get("neuron", []))
    return [t["vcpu"], t["memory_mib"] / 1024, gpus, neuron]


def older_generation(family, listed_families):
    match = re.match(r"^([a-z]+)([0-9]+)(.*)$", family)
    if not match:
        return None
    category, generation, rest = match.group(1), int(match.group(2)), match.group(3)
    for older in range(generation - 1, 0, -1):
        candidate = f"{category}{older}{rest}"
        if candidate in listed_families:
            return candidate
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_aws_prices.py <zz_generated.pricing_aws.go>")
    text = open(sys.argv[1]).read()
    start = text.index('"us-east-1": {')
    end = text.index("\n\t},", start)
    listed = {k: float(v) for k, v in re.findall(r'"([a-z0-9-]+\.[a-z0-9-]+)": ([0-9.]+)', text[start:end])}
    catalogue = json.load(open(os.path.join(CATALOGUE, "instance-types.json")))["instance_types"]
    by_name = {t["name"]: t for t in catalogue}

    known = [(features(by_name[n]), p) for n, p in listed.items() if n in by_name]
    k = len(known[0][0])
    ata = [[sum(f[i] * f[j] for f, _ in known) for j in range(k)] for i in range(k)]
    atb = [sum(f[i] * p for f, p in known) for i in range(k)]
    coefficients = solve(ata, atb)

    per_vcpu = {}
    for name, price in listed.items():
        if name in by_name:
            per_vcpu.setdefault(name.split(".")[0], []).append(price / by_name[name]["vcpu"])
    estimated = {}
    for t in catalogue:
        if t["name"] in listed:
            continue
        family = t["name"].split(".")[0]
        source = family if family in per_vcpu else older_generation(family, per_vcpu)
        if source:
            rates = sorted(per_vcpu[source])
            price = rates[len(rates) // 2] * t["vcpu"]
        else:
            price = sum(c * f for c, f in zip(coefficients, features(t)))
        estimated[t["name"]] = round(max(price, 0.001), 6)

    out = {
        "source": "Karpenter v1.5.0 static price table (aws/karpenter-provider-aws "
                  "pkg/providers/pricing/zz_generated.pricing_aws.go, Apache-2.0, generated "
                  "2025-04-28 from the AWS Price List API): us-east-1, Linux, shared tenancy, USD/hour",
        "generator": "scripts/gen_aws_prices.py",
        "region": "us-east-1",
        "estimate_formula": {"usd_per_vcpu": round(coefficients[0], 6),
                             "usd_per_gib": round(coefficients[1], 6),
                             "usd_per_gpu": round(coefficients[2], 6),
                             "usd_per_neuron_device": round(coefficients[3], 6)},
        "prices": dict(sorted(listed.items())),
        "estimated": dict(sorted(estimated.items())),
    }
    path = os.path.join(DATA, "on-demand-prices.json")
    with open(path, "w") as f:
        f.write("{\n")
        items = list(out.items())
        for i, (key, value) in enumerate(items):
            if isinstance(value, dict) and key in ("prices", "estimated"):
                body = ",\n".join(f"{json.dumps(n)}:{p}" for n, p in value.items())
                f.write(f"{json.dumps(key)}:{{\n{body}\n}}")
            else:
                f.write(f"{json.dumps(key)}:{json.dumps(value)}")
            f.write(",\n" if i + 1 < len(items) else "\n")
        f.write("}\n")
    print(f"wrote {len(listed)} listed and {len(estimated)} estimated prices to {os.path.normpath(path)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
