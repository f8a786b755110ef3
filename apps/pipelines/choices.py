"""``TextChoices`` for pipeline models, derived from ``vocabulary`` (the values are written there)."""
from apps.core.choices import text_choices
from apps.pipelines import vocabulary
from apps.placement.vocabulary import Trust as _Trust

RunKind = text_choices(vocabulary.RunKind)
RunStatus = text_choices(vocabulary.RunStatus)
NodeKind = text_choices(vocabulary.NodeKind)
NodeRuntime = text_choices(vocabulary.NodeRuntime)
NodeStatus = text_choices(vocabulary.NodeStatus, {"awaiting": "Awaiting job"})
WaitMode = text_choices(vocabulary.WaitMode)
Reuse = text_choices(vocabulary.Reuse)
Trust = text_choices(_Trust)
OutboxKind = text_choices(vocabulary.OutboxKind, {"pipeline.node_resume": "pipeline.node_resume"})
