from tests.pipelines.conftest import k8s_grove, wire  # noqa: F401  (shared fixtures)
