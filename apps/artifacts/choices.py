from django.db import models

from apps.artifacts import kinds

StorageKind = models.TextChoices("StorageKind", [(k.upper(), (k, kinds.STORAGE_KIND_LABELS[k]))
                                                 for k in kinds.STORAGE_KINDS])
PlatformStatus = models.TextChoices("PlatformStatus", [(s.upper(), (s, s.replace("_", " ").capitalize()))
                                                       for s in kinds.PLATFORM_STATUSES])
CheckVerdict = models.TextChoices("CheckVerdict", [(v.upper(), (v, v.replace("_", " ").capitalize()))
                                                   for v in kinds.CHECK_VERDICTS])
