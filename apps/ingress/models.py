from django.db import models

from apps.ingress.choices import RouteState


class IngressRoute(models.Model):
    """One public host name the edge serves, or is about to: kept by the edge on every render.

    A row exists while its route is derived (a live generation of a workload that holds the name, on a
    fresh Grove reporting a mesh address, with ``host.deploy.native_ingress`` on); ``state`` is what the
    edge's nginx made of it.
    """

    hostname = models.CharField(max_length=253, unique=True)
    path_prefix = models.CharField(max_length=200, default="/")
    workload_slug = models.CharField(max_length=100)
    team = models.CharField(max_length=100, blank=True, default="")
    environment = models.CharField(max_length=100, default="default")
    grove = models.ForeignKey("groves.Grove", null=True, on_delete=models.SET_NULL, related_name="+")
    upstream_address = models.GenericIPAddressField()
    upstream_port = models.PositiveIntegerField()
    state = models.CharField(max_length=20, choices=RouteState.choices, default=RouteState.PENDING)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    rendered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def upstream(self) -> str:
        return f"[{self.upstream_address}]:{self.upstream_port}" if ":" in self.upstream_address \
            else f"{self.upstream_address}:{self.upstream_port}"
