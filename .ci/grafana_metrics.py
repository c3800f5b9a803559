#!/usr/bin/env python3
"""Prints, one per line and sorted, every colball_* metric that the Grafana
dashboard's and the alerting rules' PromQL expressions read, so that a test
can compare them with what a live coordinator serves at /metrics.

A histogram's series (NAME_bucket, NAME_sum, NAME_count) are printed as the
family NAME; counters keep their _total. Names inside label matchers, string
literals and by/without/on/ignoring/group_left/group_right label lists do not
count.

    .ci/grafana_metrics.py                      # the repository's files
    .ci/grafana_metrics.py --sources            # NAME<TAB>where, per use
    .ci/grafana_metrics.py --dashboard D.json --rules R.yaml
    .ci/grafana_metrics.py --promql-rules OUT.yaml   # also write the
        # dashboard's queries as recording rules, Grafana variables
        # replaced, for `promtool check rules OUT.yaml` (a syntax check)

Standard library only (the rules file is read by a small reader of its
`expr:` keys, which refuses forms it does not handle rather than guess).
Exit status 1 when a file cannot be read, a dashboard panel has no query
or a duplicate id, or no metric is found.
"""

import argparse
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DASHBOARDS = [os.path.join(ROOT, "deploy", "grafana", "colball.json")]
DEFAULT_RULES = [os.path.join(ROOT, "deploy", "prometheus", "alerts.yaml")]

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
MATCHERS = re.compile(r"\{[^{}]*\}")
LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
NAME = re.compile(r"(?<![A-Za-z0-9_:])colball_[A-Za-z0-9_:]*")
# Grafana's variables, replaced for a syntax check: intervals by durations,
# anything else (a label value in a matcher) by a regular expression.
GRAFANA_INTERVALS = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}
GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def metric_names(expr):
    """The colball_* metric names an expression reads."""
    text = STRING.sub('""', expr)
    text = MATCHERS.sub("{}", text)
    text = LABEL_LIST.sub("", text)
    names = set()
    for name in NAME.findall(text):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        names.add(name)
    return names


def grafana_to_promql(expr):
    def replace(m):
        var = m.group(1) or m.group(2) or m.group(3)
        return GRAFANA_INTERVALS.get(var, ".*")

    return GRAFANA_VARIABLE.sub(replace, expr)


def dashboard_exprs(path):
    """(where, expr) for every query of a dashboard: panel targets (rows'
    nested panels too) and query variables."""
    with open(path, encoding="utf-8") as f:
        try:
            dashboard = json.load(f)
        except ValueError as e:
            raise ValueError(f"{shown(path)}: not JSON: {e}") from None
    found = []

    def walk(panels):
        for panel in panels or []:
            title = panel.get("title", "")
            for target in panel.get("targets") or []:
                expr = target.get("expr")
                if expr:
                    found.append((f"{shown(path)}: panel {title!r} {target.get('refId', '')}", expr))
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    for var in (dashboard.get("templating") or {}).get("list") or []:
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and isinstance(query, str) and query:
            found.append((f"{shown(path)}: variable {var.get('name')!r}", query))
    return found


def dashboard_problems(path):
    """What is wrong with a dashboard's structure: duplicate panel ids, a
    panel without a query or without a position."""
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    problems, ids = [], set()

    def walk(panels):
        for panel in panels or []:
            title = panel.get("title", "")
            if panel.get("id") in ids:
                problems.append(f"{shown(path)}: panel {title!r}: duplicate id {panel.get('id')}")
            ids.add(panel.get("id"))
            if "gridPos" not in panel:
                problems.append(f"{shown(path)}: panel {title!r}: no gridPos")
            if panel.get("type") != "row" and not any(
                t.get("expr") for t in panel.get("targets") or []
            ):
                problems.append(f"{shown(path)}: panel {title!r}: no query")
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    return problems


def yaml_scalar(value, where):
    """A single-line YAML scalar: plain, single- or double-quoted."""
    if value.startswith("'"):
        if not value.endswith("'") or len(value) < 2:
            raise ValueError(f"{where}: unterminated single-quoted expr")
        return value[1:-1].replace("''", "'")
    if value.startswith('"'):
        if not value.endswith('"') or len(value) < 2:
            raise ValueError(f"{where}: unterminated double-quoted expr")
        return json.loads(value)
    return re.sub(r"\s+#.*$", "", value)


def rule_exprs(path):
    """(where, expr) for every `expr:` of a Prometheus rules file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = []
    key = re.compile(r"^(\s*(?:-\s+)?)expr:(?:\s+(.*))?$")

    def indent(line):
        return len(line) - len(line.lstrip(" "))

    i = 0
    while i < len(lines):
        m = key.match(lines[i])
        if not m:
            i += 1
            continue
        where = f"{shown(path)}:{i + 1}"
        column = len(m.group(1))
        value = (m.group(2) or "").strip()
        i += 1
        if re.fullmatch(r"[|>][-+]?", value):
            block = []
            while i < len(lines) and (not lines[i].strip() or indent(lines[i]) > column):
                block.append(lines[i].strip())
                i += 1
            joiner = "\n" if value.startswith("|") else " "
            found.append((where, joiner.join(block).strip()))
            continue
        if not value:
            raise ValueError(f"{where}: an expr this reader does not handle (empty or nested)")
        # A plain scalar continued on the next lines is not handled: refuse.
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and indent(lines[j]) > column and not lines[j].lstrip().startswith("#"):
            raise ValueError(f"{where}: a multi-line plain expr; write it as a block (expr: |)")
        found.append((where, yaml_scalar(value, where)))
    return found


def as_promql(expr):
    """A dashboard query as PromQL: Grafana's variables replaced, and its
    label_values(EXPR, LABEL) and query_result(EXPR) reduced to EXPR; None
    for label_values(LABEL), which has no PromQL in it."""
    expr = grafana_to_promql(expr).strip()
    m = re.fullmatch(r"label_values\((.*),\s*\w+\s*\)", expr, re.S)
    if m:
        return m.group(1)
    if re.fullmatch(r"label_values\(\s*\w+\s*\)", expr):
        return None
    m = re.fullmatch(r"query_result\((.*)\)", expr, re.S)
    return m.group(1) if m else expr


def promql_rules_file(exprs):
    """The dashboard's queries as one group of recording rules."""
    out = ["# Generated by .ci/grafana_metrics.py: the dashboard's queries, for promtool.",
           "groups:", "  - name: grafana-dashboard", "    rules:"]
    for n, (where, expr) in enumerate(exprs):
        expr = as_promql(expr)
        if expr is None:
            continue
        out.append(f"      # {where}")
        out.append(f"      - record: grafana_dashboard:query_{n}")
        out.append("        expr: |")
        for line in expr.splitlines():
            out.append(f"          {line}")
    return "\n".join(out) + "\n"


SELF_TESTS = [
    ('sum by (colball_no) (rate(colball_a_total{colball_no="colball_no"}[5m]))', {"colball_a_total"}),
    ("histogram_quantile(0.9, sum by (le) (rate(colball_h_seconds_bucket[5m])))", {"colball_h_seconds"}),
    ("rate(colball_h_seconds_sum[5m]) / rate(colball_h_seconds_count[5m])", {"colball_h_seconds"}),
    ("colball_a / on (instance) group_left (colball_no) colball_b", {"colball_a", "colball_b"}),
    ('label_replace(colball_a, "x", "colball_no", "y", "(.*)")', {"colball_a"}),
    ("not_colball_no + colball_a offset 5m unless colball_b", {"colball_a", "colball_b"}),
    ("count without (worker) (colball_a) > 0", {"colball_a"}),
]


def self_test():
    failed = 0
    for expr, want in SELF_TESTS:
        got = metric_names(expr)
        if got != want:
            print(f"self-test: {expr!r}: got {sorted(got)}, want {sorted(want)}", file=sys.stderr)
            failed += 1
    rules = (
        "groups:\n  - name: g\n    rules:\n"
        "      - alert: A\n        expr: colball_a > 0  # comment\n"
        "      - alert: B\n        expr: 'colball_b == ''x'''\n"
        "      - alert: C\n        expr: |\n          colball_c\n\n          and colball_d\n"
        "        for: 5m\n"
        "      - expr: >-\n          colball_e\n          > 1\n        record: r\n"
    )
    want = ["colball_a > 0", "colball_b == 'x'", "colball_c\n\nand colball_d", "colball_e > 1"]
    refused = "groups:\n  - rules:\n      - expr: colball_a\n          > 0\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rules.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(rules)
        got = [expr for _, expr in rule_exprs(path)]
        if got != want:
            print(f"self-test: rules reader: got {got}, want {want}", file=sys.stderr)
            failed += 1
        with open(path, "w", encoding="utf-8") as f:
            f.write(refused)
        try:
            rule_exprs(path)
            print("self-test: a multi-line plain expr was not refused", file=sys.stderr)
            failed += 1
        except ValueError:
            pass
    total = len(SELF_TESTS) + 2
    print(f"self-test: {total - failed} passed, {failed} failed")
    return 1 if failed else 0


def shown(path):
    """A path as printed: relative to the repository when inside it."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--self-test", action="store_true", help="check the name extraction")
    parser.add_argument("--dashboard", action="append", help="a Grafana dashboard JSON file")
    parser.add_argument("--rules", action="append", help="a Prometheus rules YAML file")
    parser.add_argument("--sources", action="store_true", help="print NAME<TAB>where per use")
    parser.add_argument("--promql-rules", metavar="OUT", help="write the dashboard's queries as rules")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    dashboards = args.dashboard or DEFAULT_DASHBOARDS
    rules = args.rules or DEFAULT_RULES
    try:
        from_dashboards = [e for path in dashboards for e in dashboard_exprs(path)]
        from_rules = [e for path in rules for e in rule_exprs(path)]
    except (OSError, ValueError) as e:
        print(f"grafana_metrics: {e}", file=sys.stderr)
        return 1
    problems = [p for path in dashboards for p in dashboard_problems(path)]
    if problems:
        print("\n".join(f"grafana_metrics: {p}" for p in problems), file=sys.stderr)
        return 1
    uses = [(name, where) for where, expr in from_dashboards + from_rules
            for name in sorted(metric_names(expr))]
    if not uses:
        print("grafana_metrics: no colball_* metric found", file=sys.stderr)
        return 1
    if args.promql_rules:
        with open(args.promql_rules, "w", encoding="utf-8") as f:
            f.write(promql_rules_file(from_dashboards))
    if args.sources:
        for name, where in sorted(uses):
            print(f"{name}\t{where}")
    else:
        for name in sorted({name for name, _ in uses}):
            print(name)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(1)
