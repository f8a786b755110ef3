"""Native ingress API: the routes the edge serves, with their state, scoped to the caller's teams."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.permissions import requires
from apps.core.api.serializers import ErrorSerializer
from apps.ingress import selectors
from apps.ingress.api import serializers as s
from apps.ingress.choices import RouteState


class IngressRouteListView(APIView):
    permission_classes = [requires(GET="ingress.view_ingressroute")]

    @extend_schema(responses={200: s.IngressRouteListSerializer, 401: OpenApiResponse(ErrorSerializer),
                              403: OpenApiResponse(ErrorSerializer)},
                   parameters=[OpenApiParameter("state", enum=RouteState.values, required=False)],
                   tags=["ingress"], summary="Native ingress routes: host name, workload, Grove, mesh upstream, "
                                             "state and nginx's last error")
    def get(self, request):
        routes = selectors.routes_visible(request.user)
        state = request.query_params.get("state")
        if state:
            routes = routes.filter(state=state)
        return Response({**selectors.ingress_status(),
                         "results": s.IngressRouteSerializer(routes, many=True).data})
