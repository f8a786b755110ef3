"""Shapes shared by every API: the one error body."""
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()
    field = serializers.CharField(required=False)
