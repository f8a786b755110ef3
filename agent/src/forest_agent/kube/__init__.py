"""The Kubernetes executor (`forest-controller`): a second executor of the same Grove jobs and wire
contract as the native agent.

    spec.py        what a Grove job asks for, parsed from the wire payload (pure)
    names.py       object names from job id + attempt, label keys, DNS/label checks (pure)
    render.py      Grove job -> batch/v1 Job, apps/v1 Deployment + Service, Namespace, NetworkPolicy (pure)
    validate.py    kubernetes-validate against one pinned Kubernetes version + our own enum/DNS checks
    observe.py     Job + Pods -> a Grove job report (pure status translation)
    inventory.py   Nodes + Pods -> placement units and GPU Feature Discovery accelerator items (pure)
    cluster.py     the official `kubernetes` client: server-side apply, list, watch, delete
    controller.py  the reconcile loop: poll Host, apply, watch, report, cancel, re-list on restart
    cli.py         the `forest-controller` console script

Everything except `cluster.py`, `controller.py` and `cli.py` takes plain data and returns plain data,
so the renderer, the status translation and the inventory are unit-tested without a cluster.
Installed with the `forest-agent[kubernetes]` extra.
"""
