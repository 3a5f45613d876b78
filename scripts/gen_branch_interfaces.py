#!/usr/bin/env python3
"""Generates actors/src/providers/data/branch-interfaces.json, the pod-ENI limits per type.

`vpc.amazonaws.com/pod-eni` (Security Groups for Pods) is an extended resource the VPC resource
controller advertises on nodes whose instance type supports ENI trunking: one per branch network
interface. EC2's DescribeInstanceTypes does not publish these limits; the VPC resource
controller's limits table does, and Karpenter v1.5.0 embeds it
(pkg/providers/instancetype/zz_generated.vpclimits.go in aws/karpenter-provider-aws, Apache-2.0,
generated 2025-04-13). Karpenter offers `BranchInterface` pod ENIs on a type when
`IsTrunkingCompatible` is true and none otherwise; only those types are kept here. Pass that
file as the only argument, for example

    git -C <karpenter-provider-aws clone> show v1.5.0:pkg/providers/instancetype/zz_generated.vpclimits.go > /tmp/l.go
    python3 scripts/gen_branch_interfaces.py /tmp/l.go
"""
import json
import os
import re
import sys

OUT = os.path.join(
    os.path.dirname(__file__), "..", "actors", "src", "providers", "data", "branch-interfaces.json"
)


def parse(text):
    """Maps each trunking-compatible type to its branch interface count."""
    limits = {}
    for match in re.finditer(r'^\t"([a-z0-9.\-]+)": \{(.*?)^\t\},', text, re.S | re.M):
        name, body = match.group(1), match.group(2)
        trunking = re.search(r"IsTrunkingCompatible:\s*(true|false)", body)
        branch = re.search(r"BranchInterface:\s*(\d+)", body)
        if trunking and trunking.group(1) == "true" and branch and int(branch.group(1)) > 0:
            limits[name] = int(branch.group(1))
    return limits


def main():
    with open(sys.argv[1], encoding="utf-8") as source:
        limits = parse(source.read())
    if len(limits) < 100:
        sys.exit(f"only {len(limits)} types parsed: is this the vpclimits file?")
    lines = [
        "{",
        '"source":"VPC resource controller branch-interface limits as embedded by Karpenter v1.5.0 '
        "(aws/karpenter-provider-aws pkg/providers/instancetype/zz_generated.vpclimits.go, "
        'Apache-2.0, generated 2025-04-13): trunking-compatible types only",',
        '"generator":"scripts/gen_branch_interfaces.py",',
        '"branch_interfaces":{',
    ]
    entries = [f'"{name}":{count}' for name, count in sorted(limits.items())]
    lines.append(",\n".join(entries))
    lines.append("}}")
    with open(OUT, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    print(f"{len(limits)} types -> {OUT}")


if __name__ == "__main__":
    main()
