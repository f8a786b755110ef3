from django.apps import AppConfig


class PlacementConfig(AppConfig):
    name = "apps.placement"
    label = "placement"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from apps.accelerators.models import AcceleratorClaim

        # Host's accelerator claims live in the fleet snapshot: a claim made or released is news for it.
        post_save.connect(_claim_saved, sender=AcceleratorClaim, dispatch_uid="placement.claim_saved")


def _claim_saved(sender, instance, created: bool, update_fields=None, **kwargs) -> None:
    if not created and update_fields is not None and "state" not in update_fields:
        return  # usage accrual: the claimed counts are unchanged
    from apps.placement import snapshot

    snapshot.claims_changed(instance.grove_id)
