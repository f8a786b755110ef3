"""The infra wrapper's refusals: one exception class, stable ``infra.*`` codes.

Codes (stable; logs, tests and people grep for them):

* ``infra.policy_invalid``     a policy file is missing, not YAML, or does not match its schema
* ``infra.no_policy``          the environment has no apply-policy row
* ``infra.no_environment``     the environment has no folder under infra/environments/
* ``infra.wrong_host``         this machine is not the host the policy row names
* ``infra.plan_only``          apply asked of a plan-only environment
* ``infra.no_state_authority`` apply asked of an environment with no state-authority entry
* ``infra.state_elsewhere``    the state-authority entry names another host
* ``infra.plan_exceeds_policy`` the saved plan creates/updates/destroys more than the row allows
* ``infra.engine_unavailable`` no usable engine (see ``apps.infra.engine``)
* ``infra.engine_failed``      the engine itself failed (init, plan, show or apply)
"""

from __future__ import annotations

from apps.core.errors import ForestError


class InfraRefusal(ForestError):
    """The wrapper will not run, or will not continue; ``code`` says why."""

    status = 409
