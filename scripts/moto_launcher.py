#!/usr/bin/env python3
"""Runs moto_server in-process on a free loopback port for the aws adapter tests.

Usage: .venv/bin/python scripts/moto_launcher.py [--region us-west-2]

Prints "READY <port>" once serving, and exits when its standard input closes (the test process
that started it went away). On top of moto it:

* seeds the public SSM parameters moto lacks (EKS AL2/AL2023, Bottlerocket and Windows AMI
  aliases) and seeds them again after every POST /moto-api/reset; before the first
  DescribeImages (after start or reset) it also adds an EC2 image for each parameter's value,
  named after the parameter path, with the path's architecture (lazily: building moto's EC2
  backend costs a second that tests without images should not pay);
* injects faults, set with POST /_launcher/faults and a JSON body:
    {"ice_instance_types": ["p5.48xlarge"],        # CreateFleet/RunInstances: no capacity
     "fail": [{"action": "DescribeInstances",      # the next `count` matching calls fail
               "code": "RequestLimitExceeded", "status": 503, "count": 2,
               "body_contains": "i-123"}]}         # optional: only requests whose body has it
  and cleared with POST /_launcher/reset (or /moto-api/reset).

Pinned moto (scripts/requirements.txt): the patches below use moto internals.
"""
import argparse
import datetime
import io
import json
import sys
import threading

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import ec2_backends
from moto.ec2.models.amis import Ami
from moto.ec2.models.fleets import FleetsBackend
from moto.ec2.models.instances import InstanceBackend
from moto.ec2.responses.fleets import Fleets as FleetsResponse
from moto.core.responses import ActionResult
from moto.server import DomainDispatcherApplication, create_backend_app
from moto.moto_server.werkzeug_app import MotoRequestHandler
from moto.ssm.models import Parameter, ssm_backends
from werkzeug.serving import make_server

ACCOUNT = "123456789012"
KUBERNETES_VERSIONS = ["1.30", "1.31", "1.32", "1.33"]

LOCK = threading.Lock()
FAULTS = {"ice": set(), "fail": []}
IMAGES = {"seeded": False}  # whether the alias images exist since the last start or reset
IMAGES_LOCK = threading.Lock()  # held while seeding, so no DescribeImages overtakes it


def alias_parameters():
    """Every public alias parameter Karpenter v1.5 resolves, with a fake AMI id each."""
    names = []
    for v in KUBERNETES_VERSIONS:
        for arch in ("x86_64", "arm64"):
            for variant in ("standard", "nvidia", "neuron"):
                names.append(f"/aws/service/eks/optimized-ami/{v}/amazon-linux-2023/{arch}/{variant}/recommended/image_id")
            for flavour in ("", "-nvidia"):
                names.append(f"/aws/service/bottlerocket/aws-k8s-{v}{flavour}/{arch}/latest/image_id")
        for suffix in ("", "-arm64", "-gpu"):
            names.append(f"/aws/service/eks/optimized-ami/{v}/amazon-linux-2{suffix}/recommended/image_id")
        for release in ("2019", "2022"):
            names.append(f"/aws/service/ami-windows-latest/Windows_Server-{release}-English-Core-EKS_Optimized-{v}/image_id")
    return {name: "ami-%017x" % (abs(hash(name)) % (16 ** 17)) for name in sorted(names)}


ALIASES = alias_parameters()


ALIAS_IMAGES_CREATED = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)


def seed(region):
    backend = ssm_backends[ACCOUNT][region]
    for name, value in ALIASES.items():
        backend._parameters[name] = [Parameter(
            account_id=ACCOUNT, name=name, value=value, parameter_type="String", description=None,
            allowed_pattern=None, keyid=None, last_modified_date=datetime.datetime.now(),
            version=1, data_type="aws:ec2:image")]
    with IMAGES_LOCK:
        IMAGES["seeded"] = False


def seed_images(region):
    """The images the aliases name, so DescribeImages finds them: owned by the account
    ("self"), named after the parameter path."""
    ec2 = ec2_backends[ACCOUNT][region]
    for name, image_id in ALIASES.items():
        if image_id not in ec2.amis:
            ec2.amis[image_id] = Ami(
                ec2, image_id, name=name.strip("/").replace("/", "-")[:128],
                architecture="arm64" if "arm64" in name else "x86_64",
                virtualization_type="hvm", creation_date=ALIAS_IMAGES_CREATED,
                region_name=f"{region}a")


# ---- capacity faults ----------------------------------------------------------------------------

_run_instances = InstanceBackend.run_instances


def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
    with LOCK:
        ice = kwargs.get("instance_type") in FAULTS["ice"]
    if ice:
        raise EC2ClientError("InsufficientInstanceCapacity",
                             f"We currently do not have sufficient {kwargs.get('instance_type')} capacity.")
    return _run_instances(self, image_id, count, user_data, security_group_names, **kwargs)


InstanceBackend.run_instances = run_instances

_create_fleet = FleetsBackend.create_fleet


def create_fleet(self, *args, **kwargs):
    """Drops overrides of ICE'd instance types and reports them as fleet errors, as EC2 does."""
    configs = kwargs["launch_template_configs"]
    errors = []
    with LOCK:
        ice = set(FAULTS["ice"])
    for config in configs or []:
        kept = []
        for override in config.get("Overrides") or []:
            if override.get("InstanceType") in ice:
                errors.append({
                    "LaunchTemplateAndOverrides": {
                        "LaunchTemplateSpecification": config.get("LaunchTemplateSpecification"),
                        "Overrides": override,
                    },
                    "Lifecycle": kwargs["target_capacity_specification"].get("DefaultTargetCapacityType", "on-demand"),
                    "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": f"We currently do not have sufficient {override.get('InstanceType')} capacity.",
                })
            else:
                kept.append(override)
        if config.get("Overrides"):
            config["Overrides"] = kept
    # A config whose every override was dropped would launch the template's own type.
    kwargs["launch_template_configs"] = [c for c in configs or [] if c.get("Overrides") != []]
    if errors and not kwargs["launch_template_configs"]:
        kwargs["target_capacity_specification"] = dict(kwargs["target_capacity_specification"],
                                                       TotalTargetCapacity=0)
    fleet = _create_fleet(self, *args, **kwargs)
    fleet.launcher_errors = errors
    return fleet


FleetsBackend.create_fleet = create_fleet
_fleet_response = FleetsResponse.create_fleet


def fleet_response(self):
    result = _fleet_response(self)
    fleet_id = result.result.get("FleetId") if hasattr(result, "result") else None
    fleet = self.ec2_backend.get_fleet(fleet_id) if fleet_id else None
    errors = getattr(fleet, "launcher_errors", [])
    if errors:
        return ActionResult(dict(result.result, Errors=errors))
    return result


FleetsResponse.create_fleet = fleet_response


# ---- request faults -----------------------------------------------------------------------------

def action_of(environ, body):
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return target.rsplit(".", 1)[-1]
    for part in body.decode("utf-8", "replace").split("&"):
        if part.startswith("Action="):
            return part[len("Action="):]
    return ""


def error_response(environ, start_response, rule, action):
    status = int(rule.get("status", 400))
    request_id = f"launcher-{action}-{rule.get('served', 0)}"
    code, message = rule["code"], rule.get("message", f"injected {rule['code']}")
    if environ.get("HTTP_X_AMZ_TARGET") or "json" in environ.get("CONTENT_TYPE", ""):
        body = json.dumps({"__type": code, "message": message}).encode()
        headers = [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", request_id),
                   ("x-amzn-query-error", f"{code};Sender")]
    else:
        body = (f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
                f"<RequestID>{request_id}</RequestID></Response>").encode()
        headers = [("Content-Type", "text/xml"), ("x-amzn-RequestId", request_id)]
    start_response(f"{status} Injected", headers + [("Content-Length", str(len(body)))])
    return [body]


class Launcher:
    def __init__(self, app, region):
        self.app = app
        self.region = region

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        if path == "/_launcher/faults" and environ["REQUEST_METHOD"] == "POST":
            spec = json.loads(body or b"{}")
            with LOCK:
                FAULTS["ice"] = set(spec.get("ice_instance_types", []))
                FAULTS["fail"] = [dict(rule, served=0) for rule in spec.get("fail", [])]
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]
        if path in ("/_launcher/reset", "/moto-api/reset"):
            with LOCK:
                FAULTS["ice"], FAULTS["fail"] = set(), []
            if path == "/_launcher/reset":
                start_response("200 OK", [("Content-Type", "application/json")])
                return [b"{}"]
            result = self.app(environ, start_response)
            seed(self.region)
            return result
        action = action_of(environ, body)
        if action == "DescribeImages":
            with IMAGES_LOCK:
                if not IMAGES["seeded"]:
                    seed_images(self.region)
                    IMAGES["seeded"] = True
        with LOCK:
            for rule in FAULTS["fail"]:
                if rule["action"] == action and rule["served"] < rule.get("count", 1) and \
                        rule.get("body_contains", "").encode() in body:
                    rule["served"] += 1
                    return error_response(environ, start_response, rule, action)
        return self.app(environ, start_response)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--region", default="us-west-2")
    args = parser.parse_args()
    app = Launcher(DomainDispatcherApplication(create_backend_app), args.region)
    server = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
    seed(args.region)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"READY {server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the test process goes away
    server.shutdown()


if __name__ == "__main__":
    main()
