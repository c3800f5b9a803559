"""Fails unless every container of every pod template in the Kubernetes
manifests on standard input (kubectl kustomize output) sets
imagePullPolicy. Needs PyYAML (a dependency of kubernetes-validate)."""

import sys

import yaml


def pod_specs(doc):
    spec = (doc or {}).get("spec") or {}
    if doc.get("kind") == "Pod":
        yield spec
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    if template:
        yield template.get("spec") or {}


def main():
    missing, seen = [], 0
    for doc in yaml.safe_load_all(sys.stdin):
        for pod in pod_specs(doc):
            for key in ("initContainers", "containers"):
                for container in pod.get(key) or []:
                    seen += 1
                    if "imagePullPolicy" not in container:
                        missing.append(f"{doc['kind']}/{doc['metadata']['name']}: {container['name']}")
    if missing:
        print("containers without imagePullPolicy: " + ", ".join(missing), file=sys.stderr)
        return 1
    if seen == 0:
        print("no containers found in the input", file=sys.stderr)
        return 1
    print(f"imagePullPolicy set on all {seen} containers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
