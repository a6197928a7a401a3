# File: tests/charts/chart_rendering.py
# What the chart tests share: the repository paths, Helm's Go SDK (helm-python-sdk, installed from
# requirements.txt with this interpreter's pip when missing), rendering the chart into parsed
# Kubernetes objects (the `helm template` equivalent) and looking objects up by kind and name.
import importlib
import os
import subprocess
import sys

import yaml

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(TESTS_DIR))
CHART_DIR = os.path.join(REPO_ROOT, "charts", "qsync")
RELEASE_NAME = "qsync"
RELEASE_NAMESPACE = "qsync-system"


def import_helm():
    """Imports helm_python, installing tests/charts/requirements.txt first when it is missing."""
    try:
        return importlib.import_module("helm_python")
    except ImportError:
        requirements = os.path.join(TESTS_DIR, "requirements.txt")
        print(f"chart tests: helm_python is missing; installing {requirements} with {sys.executable}",
              file=sys.stderr)
        result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-r", requirements],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"could not install the chart test tools ({requirements}) with {sys.executable} -m pip:\n"
                f"{result.stderr}\nInstall them by hand: {sys.executable} -m pip install -r {requirements}")
        importlib.invalidate_caches()
        return importlib.import_module("helm_python")


helm = import_helm()


def render_manifests(values=None, namespace=RELEASE_NAMESPACE):
    """Renders the chart with `values` over its defaults; returns {template path: rendered text}."""
    with helm.Chart.load(CHART_DIR) as chart:
        return chart.render(values=values, name=RELEASE_NAME, namespace=namespace, is_install=True)


def render_objects(values=None, namespace=RELEASE_NAMESPACE):
    """Renders the chart and parses every manifest (NOTES.txt aside) into a list of objects.

    Raises AssertionError naming the template when a document is not valid YAML or is not a
    Kubernetes object (apiVersion, kind, metadata.name)."""
    objects = []
    for path, text in sorted(render_manifests(values, namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as error:
            raise AssertionError(f"{path} does not render to valid YAML: {error}\n{text}") from error
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict):
                raise AssertionError(f"{path} renders a YAML document that is not a mapping: {document!r}")
            missing = [key for key in ("apiVersion", "kind") if not document.get(key)]
            if not (document.get("metadata") or {}).get("name"):
                missing.append("metadata.name")
            if missing:
                raise AssertionError(f"{path} renders an object without {', '.join(missing)}:\n{text}")
            objects.append(document)
    return objects


def render_notes(values=None, namespace=RELEASE_NAMESPACE):
    """The rendered NOTES.txt."""
    manifests = render_manifests(values, namespace)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def objects_of_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def one_object(objects, kind, name=None):
    """The single object of `kind` (and `name`, when given); fails naming what was found instead."""
    found = [o for o in objects_of_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    if len(found) != 1:
        names = [o["metadata"]["name"] for o in objects_of_kind(objects, kind)]
        raise AssertionError(f"expected one {kind}{' ' + name if name else ''}, found {len(found)} "
                             f"(all {kind} objects: {names})")
    return found[0]


def load_yaml_file(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)
