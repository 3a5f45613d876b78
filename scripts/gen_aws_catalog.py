#!/usr/bin/env python3
"""Generates actors/src/kwok/data/instance-types.json, the instance-type catalogue of kwok.

Source: the DescribeInstanceTypes and DescribeInstanceTypeOfferings dumps that moto ships under
moto/ec2/resources (moto is Apache-2.0; the dumps are real AWS responses). Run it with the project
venv's Python so the pinned moto is the source:

    scripts/venv.sh >/dev/null && .venv/bin/python scripts/gen_aws_catalog.py

Only the fields the instance-type provider reads are kept, one instance type per line, so a
regeneration diffs by type.
"""
import gzip
import importlib.metadata
import json
import os
import sys

import moto
from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend

REGIONS = ["us-east-1", "us-east-2", "us-west-2", "eu-west-1"]
OUT = os.path.join(os.path.dirname(__file__), "..", "actors", "src", "kwok", "data", "instance-types.json")


def resources():
    return os.path.join(os.path.dirname(moto.__file__), "ec2", "resources")


def load(path):
    with gzip.open(path) as f:
        return json.load(f)


def compact(info):
    net = info["NetworkInfo"]
    cards = net.get("NetworkCards", [])
    default_card = net.get("DefaultNetworkCardIndex", 0)
    enis = next((c["MaximumNetworkInterfaces"] for c in cards if c.get("NetworkCardIndex") == default_card),
                net["MaximumNetworkInterfaces"])
    out = {
        "name": info["InstanceType"],
        "vcpu": info["VCpuInfo"]["DefaultVCpus"],
        "memory_mib": info["MemoryInfo"]["SizeInMiB"],
        "archs": info["ProcessorInfo"]["SupportedArchitectures"],
        "virt": info.get("SupportedVirtualizationTypes", []),
        "usage": info.get("SupportedUsageClasses", []),
        "hypervisor": info.get("Hypervisor", ""),
        "cpu_manufacturer": info["ProcessorInfo"].get("Manufacturer", ""),
        "enis": enis,
        "ipv4_per_eni": net["Ipv4AddressesPerInterface"],
        "encryption_in_transit": bool(net.get("EncryptionInTransitSupported", False)),
    }
    clock = info["ProcessorInfo"].get("SustainedClockSpeedInGhz")
    if clock:
        out["clock_mhz"] = round(clock * 1000)
    if info.get("BareMetal"):
        out["bare_metal"] = True
    if info.get("BurstablePerformanceSupported"):
        out["burstable"] = True
    bandwidth = sum(c.get("BaselineBandwidthInGbps", 0) for c in cards)
    if bandwidth:
        out["network_mbps"] = round(bandwidth * 1000)
    efa = net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    if efa:
        out["efa"] = efa
    ebs = info.get("EbsInfo", {})
    if ebs.get("EbsOptimizedSupport") == "default" and "EbsOptimizedInfo" in ebs:
        out["ebs_mbps"] = ebs["EbsOptimizedInfo"]["MaximumBandwidthInMbps"]
    storage = info.get("InstanceStorageInfo")
    if storage and storage.get("TotalSizeInGB"):
        out["storage_gb"] = storage["TotalSizeInGB"]
        if storage.get("NvmeSupport", "unsupported") != "unsupported":
            out["nvme"] = True
    gpus = info.get("GpuInfo", {}).get("Gpus", [])
    if gpus:
        out["gpus"] = [{"name": g["Name"], "manufacturer": g["Manufacturer"], "count": g["Count"],
                        "memory_mib": g.get("MemoryInfo", {}).get("SizeInMiB", 0)} for g in gpus]
    neuron = info.get("NeuronInfo", {}).get("NeuronDevices", [])
    if neuron:
        out["neuron"] = [{"name": d["Name"], "count": d["Count"], "cores": d["CoreInfo"]["Count"],
                          "memory_mib": d.get("MemoryInfo", {}).get("SizeInMiB", 0)} for d in neuron]
    accelerators = info.get("InferenceAcceleratorInfo", {}).get("Accelerators", [])
    if accelerators:
        out["accelerators"] = [{"name": a["Name"], "manufacturer": a["Manufacturer"], "count": a["Count"]}
                               for a in accelerators]
    return out


def main():
    types = load(os.path.join(resources(), "instance_types.json.gz"))
    zones_backend = RegionsAndZonesBackend.zones
    regions = {}
    zones_by_type = {}
    for region in REGIONS:
        zones = sorted((z.name, z.zone_id) for z in zones_backend[region])
        regions[region] = [{"name": n, "id": i} for n, i in zones]
        offerings = load(os.path.join(resources(), "instance_type_offerings", "availability-zone", f"{region}.json.gz"))
        for o in offerings:
            suffix = o["Location"][len(region):]
            zones_by_type.setdefault(o["InstanceType"], {}).setdefault(region, set()).add(suffix)
    lines = []
    for name in sorted(types):
        entry = compact(types[name])
        entry["zones"] = {r: "".join(sorted(s)) for r, s in sorted(zones_by_type.get(name, {}).items())}
        lines.append(json.dumps(entry, separators=(",", ":"), sort_keys=False))
    header = {
        "source": f"moto {importlib.metadata.version('moto')} (Apache-2.0): moto/ec2/resources "
                  "instance_types.json.gz and instance_type_offerings/availability-zone",
        "generator": "scripts/gen_aws_catalog.py",
        "regions": regions,
    }
    with open(OUT, "w") as f:
        f.write("{\n")
        for key, value in header.items():
            f.write(f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))},\n")
        f.write('"instance_types":[\n')
        f.write(",\n".join(lines))
        f.write("\n]}\n")
    print(f"wrote {len(lines)} instance types to {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
