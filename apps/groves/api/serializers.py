"""Serializers for the staff/CI Grove read API (the wire shapes are in ``apps.dispatch.api.serializers``)."""
from rest_framework import serializers

from apps.groves.models import AcceleratorInventoryItem, Grove, PlacementUnit


class PlacementUnitSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="unit_id")
    cpu_milli = serializers.SerializerMethodField()
    memory_bytes = serializers.SerializerMethodField()

    class Meta:
        model = PlacementUnit
        fields = ["id", "cpu_milli", "memory_bytes", "accelerators"]

    def get_cpu_milli(self, obj) -> dict:
        return {"allocatable": obj.cpu_milli_allocatable, "free": obj.cpu_milli_free}

    def get_memory_bytes(self, obj) -> dict:
        return {"allocatable": obj.memory_bytes_allocatable, "free": obj.memory_bytes_free}


class AcceleratorItemSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="inventory_id")

    class Meta:
        model = AcceleratorInventoryItem
        fields = ["id", "kind", "vendor", "model", "apis", "memory_bytes", "memory_kind", "memory_enforced",
                  "share_mode"]


class GroveSerializer(serializers.ModelSerializer):
    stale = serializers.BooleanField(read_only=True)
    ready = serializers.BooleanField(read_only=True, help_text="polled or claimed within GROVE_READY_WITHIN_S: "
                                                               "placement chooses only ready Groves")
    simulated = serializers.BooleanField(read_only=True, help_text="a demo Grove: Host makes up its reports and "
                                                                   "nothing runs its jobs")
    capacity = serializers.SerializerMethodField()

    class Meta:
        model = Grove
        fields = ["id", "slug", "name", "substrate", "roles", "platforms", "isolation_modes", "change_kinds",
                  "version", "enabled", "last_heartbeat_at", "stale", "ready", "simulated", "capacity_reported_at",
                  "capacity", "mesh_address", "mesh_proxy_port"]

    def get_capacity(self, obj) -> dict:
        return {
            "placement_units": PlacementUnitSerializer(obj.placement_units.all(), many=True).data,
            "accelerators": AcceleratorItemSerializer(obj.accelerators.all(), many=True).data,
        }


class GroveDetailSerializer(GroveSerializer):
    class Meta(GroveSerializer.Meta):
        fields = [*GroveSerializer.Meta.fields, "log_tail"]
