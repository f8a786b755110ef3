"""Serializers for the Grove API. Wire request bodies are validated by ``apps.groves.rules`` (fast, exact
field paths); the request serializers here describe those bodies for the OpenAPI schema."""
from rest_framework import serializers

from apps.groves.choices import (
    AcceleratorKind,
    ChangeKind,
    IsolationMode,
    MemoryKind,
    ShareMode,
    Substrate,
)
from apps.groves.models import AcceleratorInventoryItem, Grove, PlacementUnit


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
    field = serializers.CharField(required=False)


class EnrollRequestSerializer(serializers.Serializer):
    token = serializers.CharField()
    name = serializers.CharField(max_length=200)
    substrate = serializers.ChoiceField(choices=Substrate.choices)
    platforms = serializers.ListField(child=serializers.CharField(), min_length=1, max_length=32)
    version = serializers.CharField(required=False, allow_blank=True, max_length=100)


class EnrollResponseSerializer(serializers.Serializer):
    grove_id = serializers.UUIDField()
    credential = serializers.CharField()


class AmountSerializer(serializers.Serializer):
    allocatable = serializers.IntegerField(min_value=0)
    free = serializers.IntegerField(min_value=0)


class UnitAcceleratorSerializer(serializers.Serializer):
    inventory_id = serializers.CharField()
    allocatable = serializers.IntegerField(min_value=0)
    free = serializers.IntegerField(min_value=0)


class PlacementUnitWireSerializer(serializers.Serializer):
    id = serializers.CharField()
    cpu_milli = AmountSerializer()
    memory_bytes = AmountSerializer()
    accelerators = UnitAcceleratorSerializer(many=True, required=False)


class AcceleratorWireSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.ChoiceField(choices=AcceleratorKind.choices)
    vendor = serializers.CharField()
    model = serializers.CharField(required=False, allow_blank=True)
    apis = serializers.ListField(child=serializers.CharField())
    memory_bytes = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    memory_kind = serializers.ChoiceField(choices=MemoryKind.choices)
    memory_enforced = serializers.BooleanField()
    share_mode = serializers.ChoiceField(choices=ShareMode.choices)


class CapacitySerializer(serializers.Serializer):
    placement_units = PlacementUnitWireSerializer(many=True)
    accelerators = AcceleratorWireSerializer(many=True, required=False)


class HeartbeatRequestSerializer(serializers.Serializer):
    version = serializers.CharField(allow_blank=True, max_length=100)
    change_kinds = serializers.ListField(child=serializers.ChoiceField(choices=ChangeKind.choices))
    isolation = serializers.ListField(child=serializers.ChoiceField(choices=IsolationMode.choices), required=False)
    capacity = CapacitySerializer()
    log_tail = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False, max_length=500)


class HeartbeatResponseSerializer(serializers.Serializer):
    server_time = serializers.DateTimeField()
    stale_after_s = serializers.IntegerField()


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
    capacity = serializers.SerializerMethodField()

    class Meta:
        model = Grove
        fields = ["id", "slug", "name", "substrate", "roles", "platforms", "isolation_modes", "change_kinds",
                  "version", "enabled", "last_heartbeat_at", "stale", "capacity_reported_at", "capacity"]

    def get_capacity(self, obj) -> dict:
        return {
            "placement_units": PlacementUnitSerializer(obj.placement_units.all(), many=True).data,
            "accelerators": AcceleratorItemSerializer(obj.accelerators.all(), many=True).data,
        }


class GroveDetailSerializer(GroveSerializer):
    class Meta(GroveSerializer.Meta):
        fields = [*GroveSerializer.Meta.fields, "log_tail"]
