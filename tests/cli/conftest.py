from tests.pipelines.conftest import flag_on, k8s_grove, native_grove, wire  # noqa: F401  (shared fixtures)
