from tests.pipelines.conftest import flag_on, k8s_grove, native_grove  # noqa: F401  (shared fixtures)
