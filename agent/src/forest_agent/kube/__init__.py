"""The Kubernetes executor (`forest-controller`): a second executor of the same Grove jobs and wire
contract as the native agent.

    spec.py        what a Grove job asks for, parsed from the wire payload (pure)
    names.py       object names from job id + attempt, label keys, DNS/label checks (pure)
    render.py      Grove job -> batch/v1 Job, apps/v1 Deployment + Service, Namespace, NetworkPolicy (pure)
    validate.py    kubernetes-validate against one pinned Kubernetes version + our own enum/DNS checks
    observe.py     Job + Pods -> a Grove job report (pure status translation)
    inventory.py   Nodes + Pods -> placement units and GPU Feature Discovery accelerator items (pure)
    cluster.py     the official `kubernetes` client: server-side apply, list, watch, delete
    config.py      `ControllerConfig` (what `forest-controller run` is told) and the owner label selector
    job_states.py  a tracked job's states and allowed transitions (the `Lifecycle` table, pure)
    tracked.py     the tracked jobs, each with its `Lifecycle`: the only writer of their state
    workqueue.py   job ids to reconcile, coalesced, one worker per id at a time
    reconcile.py   per state, what to do to a job: claim, release, observe, report; cancel; re-list
    watch.py       list + watch Pods, Jobs and Deployments, and the resync: queue the tracked job ids
    controller.py  wires those parts with the heartbeat and the `changes` poll, and runs their threads
    leader.py      leader election on a Lease: the gate every claim, apply, report and delete asks
    identity.py    the Grove identity (id, credential) kept in a Secret, for a controller without a disk
    cli.py         the `forest-controller` console script

spec, names, render, validate, observe, inventory and job_states take plain data and return plain
data, so the renderer, the status translation and the inventory are unit-tested without a cluster.
Installed with the `forest-agent[kubernetes]` extra.
"""
