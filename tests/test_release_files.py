"""The files a new operator reads first agree with the code: the license is the one the metadata claims, and the
versions of the package, the image and the chart agree with each other and with the CHANGELOG."""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from typing import Any

import yaml

import captcha_worker
from captcha_worker import cli
from captcha_worker import metrics as worker_metrics
from captcha_worker.gateway import metrics as gateway_metrics
from tests.helpers import ROOT

CHART = ROOT / "charts" / "captcha-solver"


def _chart() -> dict[str, object]:
    meta: dict[str, object] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


def _pyproject() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_license_is_the_apache_license_the_metadata_claims() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a stub
    assert _pyproject()["license"] == {"text": "Apache-2.0"}
    assert _chart()["annotations"]["artifacthub.io/license"] == "Apache-2.0"  # type: ignore[index]
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()
    assert "!LICENSE" in (ROOT / ".dockerignore").read_text().splitlines()


def test_package_image_and_chart_app_version_agree() -> None:
    version = _pyproject()["version"]
    assert captcha_worker.__version__ == version
    assert _chart()["appVersion"] == version
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"(?m)^ARG VERSION=(\S+)$", dockerfile) == [version]
    assert f"docker build -t captcha-solver:{version} ." in dockerfile


def test_changelog_has_the_current_versions_and_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text)
    assert sections[0] == ("Unreleased", ""), "Keep a Changelog: an [Unreleased] section first"
    chart = _chart()
    assert sections[1][0] == chart["version"], "the newest section is the Chart.yaml version"
    newest = text.split(f"## [{chart['version']}]", 1)[1].split("\n## [", 1)[0]
    assert f"worker package and image {chart['appVersion']}" in newest
    dates = [d for _, d in sections[1:]]
    assert dates == sorted(dates, reverse=True), "newest first"


def test_security_policy_exists_and_says_how_to_report() -> None:
    text = (ROOT / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in text
    assert "not** open a public issue" in text


def test_docs_name_the_dashboards_variables() -> None:
    dashboard = json.loads((CHART / "dashboards" / "captcha-solver.json").read_text())
    names = [v["name"] for v in dashboard["templating"]["list"]]
    words = {3: "three", 4: "four", 5: "five"}
    metrics = (ROOT / "docs" / "metrics.md").read_text()
    listed = ", ".join(f"`{n}`" for n in names[:-1]) + f" and `{names[-1]}`"
    assert f"{words[len(names)]} variables, {listed}" in " ".join(metrics.split())


def test_upgrades_with_set_keep_the_earlier_values() -> None:
    """`helm upgrade --set` alone drops every value given before: every such example says
    --reset-then-reuse-values (or gives the whole values file)."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), CHART / "README.md.gotmpl",
             CHART / "values.yaml", CHART / "templates" / "NOTES.txt"]
    bad = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in texts for line in p.read_text().splitlines()
           if re.search(r"helm upgrade\b[^`|]*--set ", line) and "reset-then-reuse-values" not in line]
    assert not bad, bad


def _secret_refs(values: dict[str, Any]) -> set[tuple[str, str]]:
    """(Secret, key) pairs a values file makes the pods read (the chart's defaults for keys left out)."""
    refs = set()
    cai = values.get("captchaai") or {}
    if cai.get("existingSecret"):
        refs.add((cai["existingSecret"], cai.get("existingSecretKey", "api-key")))
    for provider in values.get("providers") or []:
        refs.add((provider["existingSecret"], provider.get("existingSecretKey", "api-key")))
    auth = (values.get("redis") or {}).get("auth") or {}
    if auth.get("existingSecret"):
        refs.add((auth["existingSecret"], auth.get("existingSecretPasswordKey", "redis-password")))
    return refs


def test_values_examples_agree_on_their_secrets() -> None:
    """Following two examples must not need two Secrets of one name: the same Secret has the same keys everywhere,
    and a `kubectl create secret` line in an example creates the keys its values read."""
    seen: dict[str, str] = {}
    for path in sorted((ROOT / "values-examples").glob("*.yaml")):
        text = path.read_text()
        created = {m.group(1): set(re.findall(r"--from-(?:literal|file)=([\w.-]+)=", m.group(0)))
                   for m in re.finditer(r"kubectl create secret generic ([\w.-]+)(.*(?:\\\n#.*)*)", text)}
        for name, key in _secret_refs(yaml.safe_load(text) or {}):
            if name in created:
                assert key in created[name], f"{path.name}: reads {name}/{key}, its kubectl creates {created[name]}"
            previous = seen.setdefault(name, key)
            assert previous == key, f"{path.name}: Secret {name} key {key}, another example uses {previous}"


SRC = ROOT / "src" / "captcha_worker"


def _section(path: str, start: str, end: str = "\n## ") -> str:
    text = (ROOT / path).read_text()
    at = text.index(start)
    return text[at:text.find(end, at + len(start)) % (len(text) + 1)]


def _literals() -> set[str]:
    """Every quoted string of the package: env var names, error codes, log events, metric names."""
    return {m for path in SRC.rglob("*.py") for m in re.findall(r"""["']([\w.-]+)["']""", path.read_text())}


def _value_exists(dotted: str) -> bool:
    node: Any = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_no_task_is_lost_names_the_durability_setting_and_it_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    promise = readme[readme.index("* **No task is lost**"):]
    promise = promise[:promise.index("\n* ")]
    assert "`REDIS_WAIT_REPLICAS`" in promise and "`externalRedis.waitReplicas`" in promise, promise
    assert 'e.integer("REDIS_WAIT_REPLICAS"' in (SRC / "config.py").read_text()
    assert _value_exists("externalRedis.waitReplicas")
    assert 'set $cfg "REDIS_WAIT_REPLICAS" (toString (int .Values.externalRedis.waitReplicas))' in (
        CHART / "templates" / "_worker.tpl").read_text()


def _compat_rows(client: str) -> dict[str, str]:
    """kind -> outcome of docs/compatibility.md's rows for one client (the name as its first cell has it)."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "compatibility.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] == client:
            rows.setdefault(cells[2], cells[3])
            if cells[3] != "works":
                rows[cells[2]] = cells[3]
    return rows


def test_readme_says_of_python_rucaptcha_what_the_compatibility_table_says() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    native = _compat_rows("python-rucaptcha 6.8.2")
    failing = {kind: outcome for kind, outcome in native.items() if outcome != "works"}
    assert native and failing, "the table has python-rucaptcha rows, some of which fail"
    families = {kind.split("_")[0] for kind in failing}
    assert families == {"recaptcha"}, f"README names only its reCAPTCHA classes as failing; the table: {failing}"
    assert all(kind in failing for kind in native if kind.startswith("recaptcha")), "every reCAPTCHA row fails"
    bugs = {re.sub(r"^client bug: |\s*\(see below\)$", "", outcome) for outcome in failing.values()}
    assert bugs == {"rejects the integer task id"}, bugs
    assert "python-rucaptcha's reCAPTCHA classes reject the integer task id" in readme
    assert set(_compat_rows("python-rucaptcha 6.8.2 v2").values()) == {"works"}
    assert "python-rucaptcha's v2 classes" in readme, "README lists the v2 classes among the clients that work"


def test_no_doc_installs_the_package_from_an_index() -> None:
    """Nothing publishes captcha-solver on PyPI: `pip install captcha-solver` would install something else or fail."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), CHART / "README.md.gotmpl",
             CHART / "templates" / "NOTES.txt", ROOT / "Dockerfile"]
    bad = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in texts for line in p.read_text().splitlines()
           if re.search(r"pip3? install (-U |--upgrade )?captcha[-_]solver\b", line)]
    assert not bad, bad


def _cli_named(text: str) -> list[tuple[str, list[str]]]:
    return [(m.group(1), re.findall(r"(--[a-z][\w-]*)", m.group(2) or ""))
            for m in re.finditer(r"captcha-worker ([a-z][\w-]*)((?: --?[\w-]+(?: [^\s`-][^\s`]*)?)*)", text)]


def _runbooks() -> dict[str, str]:
    troubleshooting = _section("docs/operations.md", "## Troubleshooting")
    rows = {sym: next(line for line in troubleshooting.splitlines() if line.startswith("|") and sym in
                      line.split("|")[1]) for sym in ("ERROR_IP_NOT_ALLOWED", "ImagePullBackOff",
                                                      "CreateContainerConfigError")}
    return {**rows, "gateway runbook": _section("docs/gateway.md", "## Runbook (on Kubernetes)"),
            "in-cluster producer": _section("docs/producer.md", "## From a pod in the cluster")}


def _names_missing(text: str) -> list[str]:
    """The env vars, error codes, log events, metrics, alerts, CLI commands and flags, value paths and labels a
    text names that the package or the chart does not have."""
    literals = _literals()
    metrics = {str(getattr(m, "_name", "")) for module in (worker_metrics, gateway_metrics)
               for m in vars(module).values()}
    rules = (CHART / "rules" / "captcha-solver.yaml").read_text()
    templates = "\n".join(p.read_text() for p in (CHART / "templates").rglob("*") if p.is_file())
    commands: dict[str, argparse.ArgumentParser] = next(
        a for a in cli.build_parser()._actions if a.dest == "command").choices  # type: ignore[assignment]
    top = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [name for name in re.findall(r"\b[A-Z][A-Z0-9]+(?:_[A-Z0-9]+)+\b", text)  # env vars, error codes
               if name not in literals]
    missing += [name for name in re.findall(r"`([a-z]+(?:_[a-z]+)+)`", text) if name not in literals]  # log events
    missing += [name for name in re.findall(r"\b(captcha_solver_[a-z_]+?)(?:_\*|\{|\b)", text)  # or a prefix
                if not any(metric.startswith(name) for metric in metrics)]
    missing += [name for name in re.findall(r"\b(CaptchaSolver[A-Za-z]+)", text) if f"alert: {name}\n" not in rules]
    for command, flags in _cli_named(text):
        sub = commands.get(command)
        missing += [f"captcha-worker {command}"] if sub is None else [
            f"captcha-worker {command} {flag}" for flag in flags if flag not in sub._option_string_actions]
    missing += [path for path in re.findall(r"`([a-z][A-Za-z]+(?:\.[a-zA-Z][A-Za-z]*)+)(?:[=:][^`]*)?`", text)
                if path.split(".")[0] in top and not _value_exists(path)]
    label = '{{ include "captcha-solver.fullname" . }}-client: "true"'
    missing += [name for name in re.findall(r"captcha-captcha-solver-client|<fullname>-client", text)
                if label not in templates]
    return missing


def test_the_runbooks_name_only_what_exists() -> None:
    """The troubleshooting rows for ERROR_IP_NOT_ALLOWED, ImagePullBackOff and CreateContainerConfigError, the
    gateway's runbook and the in-cluster producer recipe exist, and every env var, error code, log event, metric,
    alert, CLI command (and its flags) and value path they name is one the package or the chart has."""
    for where, text in _runbooks().items():
        missing = _names_missing(text)
        assert not missing, f"{where} names what does not exist: {missing}"


def _key_reload_default() -> float:
    defaults = {float(d) for path in SRC.rglob("*.py")
                for d in re.findall(r'e\.number\("KEY_RELOAD_SECONDS", ([\d.]+)', path.read_text())}
    assert len(defaults) == 1, f"the worker and the gateway read KEY_RELOAD_SECONDS with defaults {defaults}"
    return defaults.pop()


def test_the_key_pickup_time_is_said_in_one_place_and_cited() -> None:
    """docs/operations.md#key-pickup-time owns how long a key written to its Secret takes to be used (the kubelet's
    sync, then KEY_RELOAD_SECONDS) with its default; the alert and every doc that tells it either says the same
    "within about 2 minutes of the update" and links there, or gives no figure of its own."""
    default = _key_reload_default()
    owner = " ".join(_section("docs/operations.md", "### Key pickup time").split())
    assert f"`KEY_RELOAD_SECONDS` (default {default:g} s)" in owner
    assert "`syncFrequency` (1 min by default)" in owner
    promise = "within about 2 minutes of the update"
    assert promise in owner
    for path in ("docs/contracts.md", "docs/gateway.md"):
        assert f"| `KEY_RELOAD_SECONDS` | `{default:g}` |" in (ROOT / path).read_text(), path
    rule = " ".join((CHART / "rules" / "captcha-solver.yaml").read_text().split())
    assert f"probe the new key at once ({promise}, no restart)" in rule
    texts = {p: (ROOT / p).read_text() for p in ("README.md", "docs/operations.md", "docs/metrics.md",
                                                 "docs/gateway.md", "docs/contracts.md", "tests/e2e/README.md")}
    texts["docs/operations.md"] = texts["docs/operations.md"].replace(_section("docs/operations.md",
                                                                               "### Key pickup time"), "")
    for path, text in texts.items():
        for part in re.split(r"\n\n|\n\|", text):  # paragraphs and table rows
            flat = " ".join(part.split())
            if re.search(r"(?:api|tenant)_key_reloaded|kubelet", flat) and re.search(r"minute|\d s\b", flat):
                if "key pickup time" in flat:
                    assert "#key-pickup-time" in flat, f"{path}: cites the key pickup time without its link"
                    minutes = re.findall(r"within about [^,;:()]*minutes?[^,;:()]*", flat)
                    assert all(m.startswith(promise) for m in minutes), f"{path}: {minutes}"
                else:
                    assert not re.search(r"about (?:a|\d+) minutes?", flat), (
                        f"{path}: a key pickup time of its own, not the one docs/operations.md#key-pickup-time "
                        f"owns: {flat[:300]}")


def test_the_in_cluster_producer_recipe_reads_what_the_chart_creates() -> None:
    """The recipe's Deployment (release `captcha`) reads the embedded Redis's Secret under the key, and connects at
    the port, that the chart's defaults give; the gateway runbook's Secret keys are the ones the chart writes."""
    recipe = _section("docs/producer.md", "## From a pod in the cluster")
    deployment = yaml.safe_load(recipe.split("```yaml\n", 1)[1].split("```", 1)[0])
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    redis = yaml.safe_load((CHART / "values.yaml").read_text())["redis"]
    ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "captcha-captcha-solver-redis"
    created = (CHART / "templates" / "redis-secret.yaml").read_text()
    assert f'  {ref["key"]}: {{{{ include "captcha-solver.redis.password" . | b64enc' in created, (
        f"the recipe reads key {ref['key']}; the chart's generated Redis Secret writes another")
    url = f"redis://captcha-captcha-solver-redis.captcha.svc.cluster.local:{redis['port']}/0"
    assert env["REDIS_URL"]["value"] == url
    secret = (CHART / "templates" / "gateway-secret.yaml").read_text()
    runbook = _section("docs/gateway.md", "## Runbook (on Kubernetes)")
    for suffix in re.findall(r"team-[a-z]\\?\.([a-z-]+)", runbook):
        assert f"{{{{ .name }}}}.{suffix}:" in secret, f"the gateway runbook names a key .{suffix} the chart lacks"
