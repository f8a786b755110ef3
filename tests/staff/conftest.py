"""Staff fixtures: a staff browser session, the observability flag, an estate of Groves, and runs whose
nodes were placed and dispatched through the real services."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.flags.services import flag_override_set
from apps.pipelines import services as pipeline_services
from apps.pipelines.models import PipelineNode
from tests.factories import api_token_for
from tests.pipelines.graphs import exec_node, graph

FLAG = "host.staff.execution_observability"


@pytest.fixture
def staff_browser(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def observability_on():
    flag_override_set(name=FLAG, enabled=True, reason="test")


@pytest.fixture
def estate(fresh_grove):
    k8s, _ = fresh_grove(name="k8s-compute", substrate="kubernetes", roles=("compute",), change_kinds=["k8s.job"])
    gpu, _ = fresh_grove(name="gpu-box", roles=("compute",), gpus=2)
    return k8s, gpu


@pytest.fixture
def dispatched_run(estate):
    """A compute run of two container nodes: the first placed and dispatched to a Grove job, and a shadow
    (would-refuse) node pinned to the native Grove."""
    _k8s, gpu = estate

    def _make(team: str = "ml"):
        run = pipeline_services.pipeline_run_create(
            graph=graph(exec_node("train"), exec_node("pinned", grove=gpu.slug)), kind="compute", team=team)
        for node in PipelineNode.objects.filter(run=run, status="queued").order_by("position"):
            pipeline_services.pipeline_node_execute(node_id=node.pk)
        return run

    return _make


@pytest.fixture
def user_client(django_user_model):
    """A signed-in *non-staff* token user (a CI bot)."""
    user = django_user_model.objects.create_user("ci-bot", is_staff=False)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
    return client
