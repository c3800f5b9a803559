"""Copies the Kubernetes documents on standard input to standard output,
leaving out those of the kinds named as arguments (for kubernetes-validate,
which has no schema for custom resources such as KEDA's ScaledObject; a
test checks those fields against KEDA's documented ones). Needs PyYAML."""

import sys

import yaml

drop = set(sys.argv[1:])
docs = [d for d in yaml.safe_load_all(sys.stdin) if d and d.get("kind") not in drop]
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
