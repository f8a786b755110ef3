"""``POST plan``: where a pipeline graph or a compute request would run, before submitting it (as
``nomad job plan``). Reads only: every node is planned and placed exactly as a submit would do it,
and nothing is stored.

It lives with the staff API because it composes compute, pipelines and placement (staff sits above them
all); unlike the staff read API it answers any API user, as submitting does.
"""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.authentication import ApiTokenAuthentication
from apps.accounts.api.permissions import requires
from apps.accounts.selectors import body_with_team
from apps.compute import bodies as compute_bodies
from apps.compute.selectors import compute_enabled_or_refuse
from apps.core.api.serializers import ErrorSerializer
from apps.flags.selectors import is_enabled
from apps.pipelines import bodies as pipeline_bodies
from apps.pipelines.services import pipeline_plan
from apps.placement.choices import COMPATIBILITY_FLAG
from apps.placement.requirements import ExecutionRequirement
from apps.placement.services import placement_decide
from apps.staff.bodies import PlanRequest


def plan_preview(body) -> dict:
    """Validate like a submit, then decide every node's placement now (nothing written)."""
    if isinstance(body, dict) and "steps" in body:
        environment = body.get("environment") if isinstance(body.get("environment"), str) else None
        compute_enabled_or_refuse(environment=environment)
        data = compute_bodies.compute_request(body)
        canonical, kind, environment, team = data["canonical"], "compute", data["environment"], data["team"]
    else:
        data = pipeline_bodies.run_request(body)
        canonical, kind, environment, team = data["canonical"], data["kind"], data["environment"], data["team"]
    planned = pipeline_plan(canonical=canonical, run_kind=kind, environment=environment, team=team)
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment or None, team=team or None)
    nodes = []
    for item in planned:
        requirement = ExecutionRequirement.from_stored(item.requirement)
        decision = placement_decide(requirement=requirement, target=item.node.get("grove"), enforced=enforced)
        refusal = decision.refusal
        nodes.append({
            "node": item.node["id"], "position": item.position, "needs": item.node.get("needs", []),
            "requirement": item.requirement, "plan_warnings": item.warnings,
            "grove": decision.grove.slug if decision.grove is not None else None,
            "platform": decision.selected_platform or None, "chooser": decision.chooser,
            "would_refuse": decision.would_refuse,
            "refusal": {"code": refusal.code, "detail": refusal.detail} if refusal is not None else None,
            "incompatibilities": [{"code": i["code"], "message": i["message"]} for i in decision.incompatibilities],
            "summary": decision.summary, "candidates": decision.candidates,
        })
    return {"kind": kind, "environment": environment, "team": team, "enforced": enforced,
            "placeable": all(node["refusal"] is None for node in nodes), "nodes": nodes}


class PlanView(APIView):
    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [requires(POST="placement.view_executionplacement")]
    audit_writes = False  # a POST that stores nothing

    @extend_schema(request=PlanRequest, tags=["plan"],
                   responses={200: OpenApiTypes.OBJECT, **{c: OpenApiResponse(ErrorSerializer) for c in (400, 401)}},
                   summary="Preview a run or compute job: each node's Grove, platform and reasons; nothing stored")
    def post(self, request):
        # The team rule of a submit: a plan for another team would read its flags and accelerator budget.
        return Response(plan_preview(body_with_team(request.user, request.data)))
